#!/usr/bin/env python3
"""`trainbench data fetch cifar10` and `trainbench data list`, end to end.

A local HTTP server serves an archive built from the test data's
cifar-10-batches-bin in the official layout (cifar-10-binary.tar.gz); the
network is never reached. Each refusal must leave nothing where configs look.
Usage: fetch_test.py BIN_DIR DATA_DIR (DATA_DIR holds cifar-10-batches-bin/)
"""
import gzip, hashlib, http.server, io, json, os, shutil, socket, subprocess, sys, tarfile, tempfile
import threading, unittest

BIN, DATA = sys.argv[1], os.path.abspath(sys.argv[2])
del sys.argv[1:3]
FILES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
SOURCE = os.path.join(DATA, "cifar-10-batches-bin")
ARCHIVE_NAME = "cifar-10-binary.tar.gz"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_archive(path, extra=None, files=FILES + ["batches.meta.txt"]):
    """The official layout: cifar-10-batches-bin/<file>; `extra(tar)` adds entries."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        dir_info = tarfile.TarInfo("cifar-10-batches-bin")
        dir_info.type, dir_info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(dir_info)
        if extra:
            extra(tar)
        for name in files:
            tar.add(os.path.join(SOURCE, name), arcname=f"cifar-10-batches-bin/{name}")


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """Serves files with Range support; /cut/ drops the first answer midway,
    /norange/ ignores Range. Records each request's path and Range header."""

    def __init__(self, files):
        self.files, self.requests, self.cuts = files, [], 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                name = self.path.rsplit("/", 1)[-1]
                body = server.files.get(name)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng and "/norange/" not in self.path:
                    start = int(rng.split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if "/cut/" in self.path and server.cuts == 0:
                    server.cuts += 1
                    self.wfile.write(body[start:start + len(body) // 3])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                try:
                    self.wfile.write(body[start:])
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (a range it cannot use)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, prefix=""):
        return f"http://127.0.0.1:{self.port}/{prefix}{ARCHIVE_NAME}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def run(*args, env=None):
    full = dict(os.environ, **(env or {}))
    for proxy in ("http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        if env is None or proxy not in env:
            full.pop(proxy, None)
    return subprocess.run([os.path.join(BIN, "trainbench"), *args], capture_output=True, text=True, env=full,
                          timeout=600)


def error_lines(result):
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


class Fetch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="trainbench-fetch-")
        cls.archive = os.path.join(cls.tmp, ARCHIVE_NAME)
        build_archive(cls.archive)
        with open(cls.archive, "rb") as f:
            cls.body = f.read()
        cls.server = Server({ARCHIVE_NAME: cls.body})

    @classmethod
    def tearDownClass(cls):
        cls.server.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="home-", dir=self.tmp)
        self.target = os.path.join(self.home, "cifar-10-batches-bin")

    def assertNothingLeft(self, home=None):
        home = home or self.home
        left = [n for n in os.listdir(home) if n != ".cifar10-fetch.lock"]
        self.assertEqual(left, [], f"left behind in {home}: {left}")

    def assertRefused(self, result, *words):
        self.assertNotEqual(result.returncode, 0, result.stdout + result.stderr)
        errors = error_lines(result)
        self.assertEqual(len(errors), 1, result.stderr)
        for word in words:
            self.assertIn(word, errors[0])
        self.assertNothingLeft()

    def assertInstalled(self):
        for name in FILES + ["batches.meta.txt"]:
            self.assertEqual(sha256(os.path.join(self.target, name)), sha256(os.path.join(SOURCE, name)), name)
        with open(os.path.join(self.target, "trainbench-data.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["release"], "jpeg-d7d0561")
        self.assertEqual(sorted(os.listdir(self.home)), [".cifar10-fetch.lock", "cifar-10-batches-bin"])

    def test_downloads_verifies_and_installs_where_configs_look(self):
        r = run("data", "fetch", "cifar10", "--url", self.server.url(), "--dir", self.home, "--log-format", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertInstalled()
        events = [json.loads(line) for line in r.stderr.splitlines()]
        stages = {e.get("stage") for e in events if e["event"] == "data_progress"}
        self.assertEqual(stages, {"download", "unpack"}, r.stderr)
        listed = run("data", "list", "--dir", self.home)
        self.assertEqual(listed.returncode, 0, listed.stdout)
        self.assertIn("verified", listed.stdout)
        # A config that names no folder finds it in the default data folder.
        config = os.path.join(self.tmp, "default-folder.yaml")
        with open(config, "w") as f:
            f.write("name: d\ndataset: {kind: cifar10, train_size: 100, test_size: 100}\n"
                    "models: [simple_cnn]\ndevices: [cpu]\ntraining: {batch_size: 50}\n")
        env = {"XDG_DATA_HOME": os.path.dirname(self.home), "TRAINBENCH_DATA": ""}
        os.rename(self.home, os.path.join(os.path.dirname(self.home), "trainbench"))
        try:
            v = run("validate", config, env=env)
            self.assertEqual(v.returncode, 0, v.stderr)
        finally:
            os.rename(os.path.join(os.path.dirname(self.home), "trainbench"), self.home)
        # Fetched again: already there, nothing downloaded.
        before = len(self.server.requests)
        again = run("data", "fetch", "cifar10", "--url", self.server.url(), "--dir", self.home)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(len(self.server.requests), before)

    def test_a_cut_connection_is_resumed_with_a_range_request(self):
        r = run("data", "fetch", "cifar10", "--url", self.server.url("cut/"), "--dir", self.home)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertInstalled()
        ranges = [rng for path, rng in self.server.requests if "/cut/" in path]
        self.assertEqual(ranges[0], None)
        self.assertEqual(ranges[1], f"bytes={len(self.body) // 3}-", self.server.requests)

    def test_a_partial_download_is_resumed_by_the_next_fetch(self):
        with open(os.path.join(self.home, ARCHIVE_NAME + ".part"), "wb") as f:
            f.write(self.body[:1000])
        r = run("data", "fetch", "cifar10", "--url", self.server.url("resume/"), "--dir", self.home)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertInstalled()
        self.assertIn(("/resume/" + ARCHIVE_NAME, "bytes=1000-"), self.server.requests)

    def test_a_server_that_ignores_ranges_is_downloaded_from_the_start(self):
        with open(os.path.join(self.home, ARCHIVE_NAME + ".part"), "wb") as f:
            f.write(b"x" * 1000)
        r = run("data", "fetch", "cifar10", "--url", self.server.url("norange/"), "--dir", self.home)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertInstalled()

    def test_the_proxy_variables_are_honoured(self):
        r = run("data", "fetch", "cifar10", "--url", "http://cifar.invalid/" + ARCHIVE_NAME, "--dir", self.home,
                env={"http_proxy": f"http://127.0.0.1:{self.server.port}"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(("http://cifar.invalid/" + ARCHIVE_NAME, None), self.server.requests)
        self.assertInstalled()

    def test_no_network_names_the_url_and_from(self):
        closed = free_port()
        url = f"http://127.0.0.1:{closed}/{ARCHIVE_NAME}"
        self.assertRefused(run("data", "fetch", "cifar10", "--url", url, "--dir", self.home), url, "--from")
        # The default address, through a proxy that is not there.
        r = run("data", "fetch", "cifar10", "--dir", self.home,
                env={"https_proxy": f"http://127.0.0.1:{closed}", "no_proxy": ""})
        self.assertRefused(r, "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz", "--from")

    def test_an_archive_on_disk_installs_offline(self):
        r = run("data", "fetch", "cifar10", "--from", self.archive, "--dir", self.home)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertInstalled()
        self.assertTrue(os.path.exists(self.archive))

    def test_a_folder_on_disk_installs_and_a_changed_file_is_named(self):
        r = run("data", "fetch", "cifar10", "--from", DATA, "--dir", self.home)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertInstalled()
        changed = os.path.join(self.tmp, "changed")
        shutil.copytree(SOURCE, changed)
        with open(os.path.join(changed, "test_batch.bin"), "r+b") as f:
            f.seek(5000)
            byte = f.read(1)
            f.seek(5000)
            f.write(bytes([byte[0] ^ 1]))
        other = tempfile.mkdtemp(prefix="home-", dir=self.tmp)
        r = run("data", "fetch", "cifar10", "--from", changed, "--dir", other)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("test_batch.bin is damaged", r.stderr)
        self.assertNothingLeft(other)
        shutil.rmtree(changed)

    def test_a_flipped_byte_is_refused(self):
        bad = os.path.join(self.tmp, "flipped.tar.gz")
        body = bytearray(self.body)
        body[len(body) // 2] ^= 0x10
        write(bad, body)
        self.assertRefused(run("data", "fetch", "cifar10", "--from", bad, "--dir", self.home), "flipped.tar.gz")

    def test_a_flipped_byte_in_a_download_is_refused_and_not_kept(self):
        body = bytearray(self.body)
        body[len(body) // 2] ^= 0x10
        server = Server({ARCHIVE_NAME: bytes(body)})
        try:
            self.assertRefused(run("data", "fetch", "cifar10", "--url", server.url(), "--dir", self.home))
        finally:
            server.close()

    def test_a_truncated_archive_is_refused(self):
        bad = os.path.join(self.tmp, "truncated.tar.gz")
        write(bad, self.body[: len(self.body) * 6 // 10])
        self.assertRefused(run("data", "fetch", "cifar10", "--from", bad, "--dir", self.home), "truncated.tar.gz")

    def crafted(self, name, add):
        path = os.path.join(self.tmp, name)
        build_archive(path, extra=add, files=["batches.meta.txt"])
        return path

    def fetch_with_a_file_entry(self, archive, entry):
        """Fetches from an archive that adds a 4-byte plain file named `entry`."""
        def add(tar):
            info = tarfile.TarInfo(entry)
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
        return run("data", "fetch", "cifar10", "--from", self.crafted(archive, add), "--dir", self.home)

    def test_an_entry_naming_dot_dot_is_refused(self):
        r = self.fetch_with_a_file_entry("dotdot.tar.gz", "cifar-10-batches-bin/../../escaped.bin")
        self.assertRefused(r, "'..'")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "escaped.bin")))

    def test_an_absolute_entry_is_refused(self):
        r = self.fetch_with_a_file_entry("absolute.tar.gz", "/tmp/trainbench-absolute-entry.bin")
        self.assertRefused(r, "absolute")
        self.assertFalse(os.path.exists("/tmp/trainbench-absolute-entry.bin"))

    def test_links_are_refused(self):
        for kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
            def add(tar):
                info = tarfile.TarInfo("cifar-10-batches-bin/data_batch_1.bin")
                info.type, info.linkname = kind, "/etc/passwd"
                tar.addfile(info)
            r = run("data", "fetch", "cifar10", "--from", self.crafted(f"link{kind}.tar.gz", add), "--dir", self.home)
            self.assertRefused(r, "is a link")

    def test_a_full_disk_during_the_unpack_leaves_nothing(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a small tmpfs")
        small = tempfile.mkdtemp(prefix="small-", dir=self.tmp)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", small],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a tmpfs here (a container without CAP_SYS_ADMIN)")
        try:
            r = run("data", "fetch", "cifar10", "--from", self.archive, "--dir", small)
            self.assertNotEqual(r.returncode, 0)
            errors = error_lines(r)
            self.assertEqual(len(errors), 1, r.stderr)
            self.assertIn("No space left on device", errors[0])
            self.assertNothingLeft(small)
        finally:
            subprocess.run(["umount", small])

    def test_a_folder_trainbench_did_not_install_is_left_alone(self):
        os.makedirs(self.target)
        mine = os.path.join(self.target, "mine.txt")
        write(mine, b"keep me")
        r = run("data", "fetch", "cifar10", "--from", self.archive, "--dir", self.home)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not installed by trainbench", r.stderr)
        with open(mine, "rb") as f:
            self.assertEqual(f.read(), b"keep me")

    def test_list_names_missing_and_damaged_data(self):
        r = run("data", "list", "--dir", self.home)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("missing", r.stdout)
        self.assertIn("trainbench data fetch cifar10", r.stdout)
        self.assertEqual(run("data", "fetch", "cifar10", "--from", self.archive, "--dir", self.home).returncode, 0)
        path = os.path.join(self.target, "data_batch_2.bin")
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:
            f.seek(123)
            f.write(b"\xff")
        r = run("data", "list", "--dir", self.home)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("damaged", r.stdout)
        self.assertIn("data_batch_2.bin", r.stdout)
        # --force puts it right.
        r = run("data", "fetch", "cifar10", "--from", self.archive, "--dir", self.home, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertInstalled()

    def test_missing_data_names_the_fetch_command(self):
        config = os.path.join(self.tmp, "missing.yaml")
        with open(config, "w") as f:
            f.write("name: m\ndataset: {kind: cifar10}\nmodels: [simple_cnn]\ndevices: [cpu]\n")
        r = run("validate", config, env={"XDG_DATA_HOME": self.home, "TRAINBENCH_DATA": ""})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("trainbench data fetch cifar10", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
