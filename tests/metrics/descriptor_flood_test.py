#!/usr/bin/env python3
"""No number of idle clients can end a run by taking its file descriptors.

The run starts under the usual 1,024-descriptor limit and serves /metrics
over HTTP, then over HTTPS; 1,300 clients connect and stay idle, and 200 more
send half a TLS ClientHello and stop, while two cells train. The run must end
with exit 0 and both cells ok, and /metrics must answer once the flood is gone.
Usage: descriptor_flood_test.py BIN_DIR DATA_DIR
"""
import json, os, resource, socket, subprocess, sys, tempfile, time, unittest, urllib.request

from metrics_run import free_port, run_args, wait_until_served

BIN, DATA = sys.argv[1], os.path.abspath(sys.argv[2])
del sys.argv[1:3]
IDLE, HALF_OPEN, LIMIT = 1300, 200, 1024


def limit_descriptors():
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


# The start of a TLS 1.2 ClientHello record, cut short: a handshake begun
# and never finished.
HALF_HELLO = bytes.fromhex("16030100c8010000c40303") + os.urandom(16)


class IdleClientsCannotEndARun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = IDLE + HALF_OPEN + 200
        if hard != resource.RLIM_INFINITY and hard < want:
            raise unittest.SkipTest(f"this test holds {want} connections; the hard descriptor limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else hard, hard))

    def flood(self, port):
        held = []
        for i in range(IDLE + HALF_OPEN):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                if i >= IDLE:
                    s.send(HALF_HELLO)
                held.append(s)
            except OSError:
                pass  # turned away or the backlog is full: also what a server may do
        return held

    def run_flooded(self, tls):
        tmp = tempfile.mkdtemp(prefix="tb-flood-")
        port = free_port()
        config = os.path.join(tmp, "exp.yaml")
        with open(config, "w") as f:
            f.write(f"name: flood\ndataset: {{kind: cifar10, path: {DATA}}}\n"
                    "models: [simple_cnn, {plugin: simple_cnn, label: again}]\ndevices: [cpu]\n"
                    "training: {epochs: 1, batch_size: 50}\nmeasurement: {warmup_steps: 1, max_steps: 20}\n")
        args, url, context = run_args(BIN, config, os.path.join(tmp, "out"), port, tls, 60, tmp)
        log = open(os.path.join(tmp, "run.log"), "w")
        run = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit_descriptors)
        scheme = "https" if tls else "http"
        try:
            wait_until_served(url, context, lambda: run.poll() is None)
        except OSError:
            self.fail("/metrics never answered: " + open(os.path.join(tmp, "run.log")).read())
        held = self.flood(port)
        try:
            # The cells train (and results files are written) under the flood.
            while run.poll() is None and not os.path.exists(os.path.join(tmp, "out", "results.csv")):
                time.sleep(0.2)
            results = os.path.join(tmp, "out", "results.json")
            while run.poll() is None:
                try:
                    cells = json.load(open(results))["cells"]
                    if all(c["status"] != "pending" for c in cells):
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.5)
        finally:
            for s in held:
                s.close()
        # The flood gone, /metrics answers within the linger.
        answered, start = False, time.time()
        while time.time() - start < 50:
            try:
                urllib.request.urlopen(url, timeout=5, context=context).read()
                answered = True
                print(f"{scheme}: /metrics answered {time.time() - start:.1f} s after the flood")
                break
            except OSError:
                time.sleep(0.25)
        # The cells are done; a stop during the linger ends it at once, with
        # 128 + SIGTERM. A run the flood had broken would have exited 1 already.
        lingering = run.poll() is None
        if lingering:
            run.terminate()
        code = run.wait(timeout=300)
        log.close()
        output = open(os.path.join(tmp, "run.log")).read()
        self.assertEqual(code, 143 if lingering else 0, output)
        cells = json.load(open(os.path.join(tmp, "out", "results.json")))["cells"]
        self.assertEqual([c["status"] for c in cells], ["ok", "ok"], output)
        self.assertTrue(answered, f"{scheme}: /metrics did not answer after the flood")
        print(f"{scheme}: {len(held)} idle or half-open clients held; the run ended ok")

    def test_http(self):
        self.run_flooded(tls=False)

    def test_https(self):
        self.run_flooded(tls=True)


if __name__ == "__main__":
    result = unittest.main(exit=False).result
    # A skipped test shows as skipped (ctest: SKIP_RETURN_CODE 77), never as passed.
    sys.exit(1 if not result.wasSuccessful() else 77 if result.skipped else 0)
