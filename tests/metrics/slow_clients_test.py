#!/usr/bin/env python3
"""/metrics stays reachable while slow clients hold connections.

50 clients connect and send a request one byte every 2 seconds (a slowloris),
over HTTP and over HTTPS (after a finished TLS handshake); meanwhile a normal
scrape must succeed within Prometheus's default scrape timeout (10 s).
Usage: slow_clients_test.py BIN_DIR DATA_DIR
"""
import os, socket, ssl, subprocess, sys, tempfile, threading, time, unittest, urllib.request

from metrics_run import free_port, run_args, wait_until_served

BIN, DATA = sys.argv[1], os.path.abspath(sys.argv[2])
del sys.argv[1:3]
SLOW_CLIENTS = 50


class SlowClients:
    """Connections that trickle a request, one byte every 2 s, until stopped."""

    def __init__(self, port, tls):
        self.stop = threading.Event()
        self.sockets = []
        context = ssl._create_unverified_context() if tls else None
        for _ in range(SLOW_CLIENTS):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if context:
                s = context.wrap_socket(s)
            self.sockets.append(s)
        self.thread = threading.Thread(target=self.trickle, daemon=True)
        self.thread.start()

    def trickle(self):
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        i = 0
        while not self.stop.is_set():
            for s in list(self.sockets):
                try:
                    s.send(request[i % len(request):i % len(request) + 1])
                except OSError:
                    self.sockets.remove(s)  # the server closed it: what it should do
            i += 1
            self.stop.wait(2)

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.sockets:
            s.close()


class SlowClientsCannotStarveMetrics(unittest.TestCase):
    def run_with_metrics(self, tls):
        tmp = tempfile.mkdtemp(prefix="tb-slow-")
        port = free_port()
        config = os.path.join(tmp, "exp.yaml")
        with open(config, "w") as f:
            f.write(f"name: slow\ndataset: {{kind: cifar10, path: {DATA}}}\nmodels: [simple_cnn]\ndevices: [cpu]\n"
                    "measurement: {warmup_steps: 1, max_steps: 2}\n")
        args, url, context = run_args(BIN, config, os.path.join(tmp, "out"), port, tls, 90, tmp)
        run = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        scheme = "https" if tls else "http"
        try:
            wait_until_served(url, context, lambda: True)
            slow = SlowClients(port, tls)
            try:
                time.sleep(3)  # they now hold their connections
                start = time.time()
                with urllib.request.urlopen(url, timeout=10, context=context) as r:
                    body = r.read().decode()
                self.assertEqual(r.status, 200)
                self.assertIn("trainbench_", body)
                print(f"{scheme}: a scrape beside {SLOW_CLIENTS} slow clients took {time.time() - start:.2f} s")
            finally:
                slow.close()
        finally:
            run.terminate()
            run.wait(timeout=60)

    def test_http(self):
        self.run_with_metrics(tls=False)

    def test_https(self):
        self.run_with_metrics(tls=True)


if __name__ == "__main__":
    unittest.main()
