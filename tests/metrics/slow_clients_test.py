#!/usr/bin/env python3
"""/metrics stays reachable while slow clients hold connections, and while
idle clients reconnecting at once keep the TLS front full.

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


def start_serving_run(name, tls, linger):
    """A one-cell run serving /metrics (HTTPS with `tls`), lingering `linger`
    seconds after it; (the process, its port, the URL, the SSL context)."""
    tmp = tempfile.mkdtemp(prefix=f"tb-{name}-")
    port = free_port()
    config = os.path.join(tmp, "exp.yaml")
    with open(config, "w") as f:
        f.write(f"name: {name}\ndataset: {{kind: cifar10, path: {DATA}}}\nmodels: [simple_cnn]\ndevices: [cpu]\n"
                "measurement: {warmup_steps: 1, max_steps: 2}\n")
    args, url, context = run_args(BIN, config, os.path.join(tmp, "out"), port, tls, linger, tmp)
    run = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return run, port, url, context


class SlowClientsCannotStarveMetrics(unittest.TestCase):
    def run_with_metrics(self, tls):
        run, port, url, context = start_serving_run("slow", tls, 90)
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


class ReconnectingIdleClients:
    """Clients that connect, stay idle, and connect again as soon as they are
    closed, so that the front is always full of them."""

    def __init__(self, port, count):
        self.stop, self.port = threading.Event(), port
        self.threads = [threading.Thread(target=self.hold, daemon=True) for _ in range(count)]
        for t in self.threads:
            t.start()

    def hold(self):
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                self.stop.wait(0.05)
                continue
            s.settimeout(0.5)
            while not self.stop.is_set():
                try:
                    if s.recv(1) == b"":
                        break  # closed by the server: come back at once
                except socket.timeout:
                    continue
                except OSError:
                    break
            s.close()

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class IdleClientsCannotTurnScrapersAway(unittest.TestCase):
    """70 idle clients reconnecting as soon as they are closed, more than the
    TLS front's 64 connections: every one of 30 scrapes must still succeed."""

    def test_https(self):
        run, port, url, context = start_serving_run("idle", True, 120)
        try:
            wait_until_served(url, context, lambda: True)
            idle = ReconnectingIdleClients(port, 70)
            failed = []
            try:
                time.sleep(2)  # the front is full of them
                for i in range(30):
                    try:
                        with urllib.request.urlopen(url, timeout=10, context=context) as r:
                            self.assertEqual(r.status, 200)
                            r.read()
                    except OSError as e:
                        failed.append(f"scrape {i}: {e}")
                    time.sleep(0.2)
            finally:
                idle.close()
            self.assertEqual(failed, [])
        finally:
            run.terminate()
            run.wait(timeout=60)


if __name__ == "__main__":
    unittest.main()
