"""No path reaches a file but static/index.js: `..`, percent-encoded and double-encoded
variants, absolute paths, backslashes, NUL bytes, overlong UTF-8. In-process (the WSGI app,
given the path as a server decodes it) and through the real `tensorboard` server (raw bytes on
a socket, so no client library normalizes the path first)."""

from __future__ import annotations

import importlib.resources
import os
import re
import socket
import urllib.parse

import pytest
import werkzeug.test
from werkzeug.wrappers import Request

from backend import Backend
from tb_server import TensorBoardServer
from weird_logs import write_runs

INDEX_JS = importlib.resources.files("tb_wur_plugin").joinpath("static/index.js").read_bytes()
STATIC = os.path.abspath(str(importlib.resources.files("tb_wur_plugin").joinpath("static")))
PREFIX = "/data/plugin/wur/"
SECRET = "wur-sentinel-4f1c2a"  # the content of a file no path may reach


def _targets(sentinel: str) -> list[tuple[str, bool]]:
    """(raw request path, whether it may be answered with index.js) pairs."""
    up = "../" * 24  # from static/, far past the filesystem root
    files = [sentinel.lstrip("/"), "etc/passwd", "../plugin.py", "../../setup.py"]
    targets = []
    for name in files:
        relative = up + name if not name.startswith("..") else name
        for variant in (
            relative,
            relative.replace("/", "%2f"),
            relative.replace("/", "%2F").replace(".", "%2E"),
            relative.replace(".", "%2e"),
            relative.replace("/", "%252f").replace(".", "%252e"),  # double encoding
            relative.replace("%", "%25").replace("/", "%c0%af").replace(".", "%c0%ae"),  # overlong
            relative.replace("/", "\\"),
            relative.replace("/", "%5c"),
            relative.replace("/", "/./"),
            relative.replace("/", "//"),
        ):
            targets += [
                (PREFIX + variant, False),
                (PREFIX + "index.js/" + variant, False),
                (PREFIX + "static/" + variant, False),
                (PREFIX + "index.js%00/" + variant, False),
                ("/" + variant, False),
                (PREFIX + "index.js?path=" + variant, True),  # a query names no file
            ]
    targets += [
        (PREFIX + sentinel, False),  # absolute paths
        (PREFIX + "/" + sentinel, False),
        (PREFIX + urllib.parse.quote(sentinel, safe=""), False),
        (PREFIX + "file://" + sentinel, False),
        (PREFIX + STATIC + "/index.js", False),
        (PREFIX + "C:\\Windows\\win.ini", False),
        (PREFIX + "static/index.js", False),
        (PREFIX + "index.js", True),
        (PREFIX + "index%2ejs", True),  # the same file, however it is spelled
        (PREFIX + "index.js/", True),  # TensorBoard drops one trailing slash
        (PREFIX + "index.js;x=1", True),  # and ;params
        (PREFIX + "index.js;x=../../setup.py", False),
        (PREFIX + "index.js#../../setup.py", True),
        (PREFIX + "index.js.map", False),
        (PREFIX + "index.js%2f..%2f..%2fplugin.py", False),
        (PREFIX + "plugin.py", False),
        (PREFIX + "http_api.md", False),
        (PREFIX + "__init__.py", False),
        (PREFIX + "..", False),
        (PREFIX + "%2e%2e", False),
        (PREFIX + "static", False),
        (PREFIX + "static/", False),
        (PREFIX + "index.JS", False),
    ]
    return targets


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    path = tmp_path_factory.mktemp("outside") / "secret.txt"
    path.write_text(SECRET)
    return str(path)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("traversal"))
    write_runs(logdir)
    return logdir


def _check(target: str, may_serve_index: bool, status: int, body: bytes) -> None:
    assert SECRET.encode() not in body and b"root:" not in body, target
    if status == 200:
        assert may_serve_index and body == INDEX_JS, (target, body[:200])
    else:
        assert status in (400, 404), (target, status, body[:200])
        assert len(body) < 1000 and b"Traceback" not in body, target


def test_in_process_no_path_escapes_static(logdir, sentinel):
    client = Backend(logdir).client
    targets = _targets(sentinel)
    served = 0
    for target, may_serve_index in targets:
        path, _, query = target.partition("#")[0].partition("?")  # a server drops #fragment
        for method in ("GET", "HEAD"):
            environ = werkzeug.test.EnvironBuilder(path="/", method=method).get_environ()
            # as a server passes it: percent-decoded, the bytes as latin-1
            environ["PATH_INFO"] = urllib.parse.unquote_to_bytes(path).decode("latin-1")
            environ["QUERY_STRING"] = query
            response = client.open(Request(environ))
            body = response.get_data()
            if method == "GET":
                _check(target, may_serve_index, response.status_code, body)
                served += response.status_code == 200
            else:
                assert body == b"" and response.status_code in (200, 400, 404), target
    assert len(targets) > 250 and served == sum(ok for _, ok in targets)


def _raw_get(url: str, target: bytes) -> tuple[int, bytes]:
    """GET `target` exactly as given, over HTTP/1.0 (so the body ends at EOF)."""
    host, port = re.match(r"http://([\d.]+):(\d+)", url).groups()
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(b"GET " + target + b" HTTP/1.0\r\nHost: " + host.encode() + b"\r\n\r\n")
        data = b""
        while chunk := connection.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_real_server_no_path_escapes_static(logdir, sentinel):
    targets = [(t.encode(), ok) for t, ok in _targets(sentinel)]
    targets += [  # raw bytes no client would send, and forms of the request target
        ((PREFIX + "\xff\xfe/../../setup.py").encode("latin-1"), False),
        ((PREFIX + "ü/../index.js").encode(), False),
        (b"http://127.0.0.1" + PREFIX.encode() + b"../../../etc/passwd", False),
        (b"http://127.0.0.1" + PREFIX.encode() + b"index.js", True),
        (b"//etc/passwd", False),
        (b"*", False),
    ]
    with TensorBoardServer(logdir, load_fast=True) as server:
        served = 0
        for target, may_serve_index in targets:
            status, body = _raw_get(server.url, target)
            _check(target.decode("latin-1"), may_serve_index, status, body)
            served += status == 200
        assert served == sum(ok for _, ok in targets)
        assert "Traceback" not in server.output()
