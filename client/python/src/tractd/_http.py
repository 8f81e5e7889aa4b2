"""HTTP to tractd (proto/API.md) with the standard library only.

Owns the address rules, which mirror tractctl's (client/tctl_args.c): the
Unix socket by default ($TRACTD_SOCKET, else $XDG_RUNTIME_DIR/tractd.sock
when it exists, else /run/tractd/tractd.sock), or TCP with a bearer token
(the argument, else the first line of token_file, else $TRACTD_TOKEN).
Each request opens its own connection: a poll, an upload or a download never
meets a keep-alive connection the daemon has closed meanwhile
(header_timeout_seconds). Error answers become TractdError with the
daemon's code, field and message.
"""
import http.client
import json
import os
import socket
import urllib.parse

from ._errors import TractdError

SYSTEM_SOCKET = "/run/tractd/tractd.sock"
CHUNK = 1 << 20


class _UnixConnection(http.client.HTTPConnection):
    """HTTPConnection over an AF_UNIX stream socket."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def default_socket():
    """The socket tractctl would use: $TRACTD_SOCKET, else the per-user socket
    of `tractd serve` when it exists, else the system daemon's."""
    env = os.environ.get("TRACTD_SOCKET")
    if env:
        return env
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        path = os.path.join(runtime_dir, "tractd.sock")
        if os.path.exists(path):
            return path
    return SYSTEM_SOCKET


def read_token_file(path):
    """The first line of path without its blanks, as tractctl --token-file."""
    with open(path, encoding="utf-8") as f:
        token = f.readline().strip(" \t\r\n").split()
    if not token:
        raise ValueError(f"token_file: no token on the first line of {path}")
    return token[0]


class Transport:
    """Where the daemon is and how to ask it; one connection per request."""

    def __init__(self, address=None, token=None, token_file=None, timeout=10.0):
        if token is not None and token_file is not None:
            raise ValueError("token and token_file exclude each other")
        if address is None:
            address = default_socket()
        address = os.fspath(address)
        self.timeout = timeout
        if address.startswith(("http://", "https://")):
            url = urllib.parse.urlsplit(address)
            if not url.hostname:
                raise ValueError(f"address: no host in {address!r}")
            self._tls = url.scheme == "https"
            self._host, self._port = url.hostname, url.port
            self.socket_path = None
            if token_file is not None:
                token = read_token_file(token_file)
            elif token is None:
                token = os.environ.get("TRACTD_TOKEN") or None
            if token is not None and not token:
                raise ValueError("token: empty")
            self.token = token
        else:
            path = address[len("unix://"):] if address.startswith("unix://") else address
            if not path:
                raise ValueError(f"address: no socket path in {address!r}")
            if token is not None or token_file is not None:
                raise ValueError("token: goes with http:// addresses; on the Unix socket the "
                                 "daemon knows you by your user id")
            self.socket_path = path
            self.token = None
        self.address = address

    def _connection(self):
        if self.socket_path is not None:
            return _UnixConnection(self.socket_path, self.timeout)
        cls = http.client.HTTPSConnection if self._tls else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self.timeout)

    def open(self, method, path, body=None, headers=None):
        """Sends a request; returns (connection, response) for the caller to
        read and close. Error answers (>= 400) raise TractdError."""
        headers = dict(headers or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        conn = self._connection()
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ConnectionError(f"cannot talk to tractd at {self.address}: {e}") from e
        if response.status >= 400:
            try:
                data = response.read()
            finally:
                conn.close()
            raise error_from_answer(method, path, response.status, data)
        return conn, response

    def request(self, method, path, body=None, headers=None):
        """(status, body bytes) of a request that succeeded."""
        conn, response = self.open(method, path, body, headers)
        try:
            return response.status, response.read()
        finally:
            conn.close()

    def json(self, method, path, doc=None):
        """The JSON answer of a request, sending doc as JSON when given."""
        if doc is None:
            return self.json_body(method, path)
        return self.json_body(method, path, json.dumps(doc).encode("utf-8"),
                              {"Content-Type": "application/json"})

    def json_body(self, method, path, body=None, headers=None):
        """The JSON answer (None when empty) of a request with a raw body
        (bytes or a binary file object, streamed)."""
        status, data = self.request(method, path, body, headers)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise TractdError(f"{method} {path}: the answer is not JSON ({e})",
                              status=status) from e

    def exists(self, path):
        """HEAD: True on 2xx, False on 404."""
        try:
            self.request("HEAD", path)
        except TractdError as e:
            if e.status == 404:
                return False
            raise
        return True

    def stream_to(self, path, sink):
        """GET path, writing the body to the binary file object sink in
        chunks; returns the bytes written."""
        conn, response = self.open("GET", path)
        written = 0
        try:
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                sink.write(chunk)
                written += len(chunk)
        except http.client.IncompleteRead as e:
            raise TractdError(f"GET {path}: the answer broke off after {written} bytes "
                              "(the job failed or was cancelled meanwhile)") from e
        finally:
            conn.close()
        return written


def error_from_answer(method, path, status, data):
    """TractdError from an error answer: the daemon's {"error": {...}} when the
    body is one, else the status line."""
    try:
        err = json.loads(data)["error"]
        return TractdError(err.get("message", ""), status=status, code=err.get("code"),
                           field=err.get("field") or None)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = data[:200].decode("utf-8", "replace") if data else ""
        return TractdError(f"{method} {path}: HTTP {status} {text}".rstrip(), status=status)
