from setuptools import find_packages, setup

setup(
    name="tb-wur-plugin",
    version="0.1.0",
    description="TensorBoard plugin and summary writer for per-layer weight-update ratios",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["tb_wur_plugin", "tb_wur_plugin.*"]),
    package_data={"tb_wur_plugin": ["static/*", "http_api.md"]},
    install_requires=[  # no TensorFlow: the tab, `tb-wur`, `writer`, `torch` and `jax` need none
        "tensorboard>=2.16",
        "werkzeug>=2.0",
        "numpy>=1.23",
        "google-crc32c>=1.5",  # event-file checksums without TensorFlow
    ],
    # Lower bounds only, for users' environments; the versions the tests run are pinned in
    # constraints.txt, which scripts/env.sh (the test command, CI) installs with.
    extras_require={
        "test": ["pytest>=7", "hypothesis>=6",
                 "pytest-xdist>=3.5",  # tests/conftest.py subclasses its LoadScopeScheduling
                 "pandas>=2", "transformers>=4.30", "accelerate>=0.20.1", "lightning>=2.0"],
        "demo": ["scikit-learn>=1.0"],
        # torch.distributed.tensor (DTensor, FSDP2's parameters) is public from 2.5 on
        "torch": ["torch>=2.5"],  # tb_wur_plugin.torch
        # jax.tree_util.tree_flatten_with_path (the tags' pytree paths)
        "jax": ["jax>=0.4.14", "optax>=0.1.7"],  # tb_wur_plugin.jax
        # the Trainer requires accelerate (>=0.20.1) from transformers 4.30 on
        "transformers": ["transformers>=4.30", "accelerate>=0.20.1"],  # tb_wur_plugin.transformers
        # the unified `lightning` package (lightning.pytorch) is from 2.0 on
        "lightning": ["lightning>=2.0"],  # tb_wur_plugin.lightning
        # wur_summary, the Keras callback, armijo and compat.v1
        "tensorflow": ["tensorflow>=2.16", "keras>=3.0"],
    },
    entry_points={
        "tensorboard_plugins": ["wur = tb_wur_plugin.plugin:WURLoader"],
        "console_scripts": ["tb-wur = tb_wur_plugin.cli:console_main"],
    },
)
