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
    extras_require={
        "test": ["pytest>=7", "hypothesis>=6", "pytest-xdist==3.8.0", "pandas>=2",
                 "transformers==5.24.0", "accelerate==1.15.0", "lightning==2.6.6"],  # scripts/test.sh runs in parallel; tests/conftest.py subclasses its scheduler
        "demo": ["scikit-learn>=1.0"],
        "torch": ["torch==2.13.0"],  # tb_wur_plugin.torch
        "jax": ["jax", "optax"],  # tb_wur_plugin.jax
        "transformers": ["transformers==5.24.0", "accelerate==1.15.0"],  # tb_wur_plugin.transformers
        "lightning": ["lightning==2.6.6"],  # tb_wur_plugin.lightning
        # wur_summary, the Keras callback, armijo and compat.v1
        "tensorflow": ["tensorflow>=2.16", "keras>=3.0"],
    },
    entry_points={
        "tensorboard_plugins": ["wur = tb_wur_plugin.plugin:WURLoader"],
        "console_scripts": ["tb-wur = tb_wur_plugin.cli:console_main"],
    },
)
