#!/usr/bin/env python3
"""A real Prometheus scrapes a real `trainbench run` on the CIFAR-10 mini set.

Checks: the target comes up; metrics arrive and change while training runs;
`promtool check metrics` finds nothing wrong in a scraped /metrics; every
dashboard panel's PromQL, template variables filled in, returns data; a port
already in use is a one-line error before any training.
Usage: prometheus_test.py BIN_DIR DATA_DIR DASHBOARD_JSON
"""
import json, os, shutil, signal, socket, subprocess, sys, tempfile, threading, time, unittest, urllib.parse, urllib.request

BIN, DATA, DASHBOARD = sys.argv[1:4]
del sys.argv[1:4]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def write_small_experiment(folder, name, max_steps, extra=""):
    """One SimpleCNN cell on the CPU, as FOLDER/exp.yaml; returns its path."""
    path = os.path.join(folder, "exp.yaml")
    with open(path, "w") as f:
        f.write(f"""name: {name}
dataset: {{kind: cifar10, path: {DATA}}}
models: [simple_cnn]
devices: [cpu]
measurement: {{warmup_steps: 1, max_steps: {max_steps}}}
{extra}""")
    return path


def wait_until_answers(call, seconds=30):
    """Calls `call` until it stops raising OSError (a server coming up)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            call()
            return
        except OSError:
            time.sleep(0.3)


class PrometheusScrapesTrainbench(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for tool in ("prometheus", "promtool"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} not found: install Debian's 'prometheus' package (scripts/setup.sh does)")
        cls.tmp = tempfile.mkdtemp(prefix="tb-prom-")
        cls.metrics_port, cls.prom_port = free_port(), free_port()
        config = os.path.join(cls.tmp, "exp.yaml")
        with open(config, "w") as f:
            f.write(f"""name: promtest
dataset: {{kind: cifar10, path: {DATA}}}
models: [simple_cnn, resnet18]
devices: [{{plugin: cpu, label: cpu-1thread, options: {{threads: 1}}}}, cpu,
          {{plugin: cpu, label: cpu-2ranks, processes: 2, options: {{threads: 1}}}}]
training: {{epochs: 2, batch_size: 50}}
measurement: {{warmup_steps: 2, progress_interval_seconds: 0.5, time_budget_seconds: 6, baseline: cpu-1thread,
              peak_tflops: 0.2}}
""")
        # A fake RAPL counter (20 W), so the energy panels have data on a
        # machine without one.
        cls.powercap = os.path.join(cls.tmp, "powercap")
        os.makedirs(os.path.join(cls.powercap, "intel-rapl:0"))
        with open(os.path.join(cls.powercap, "intel-rapl:0", "max_energy_range_uj"), "w") as f:
            f.write("262143328850\n")
        cls.powercap_done = threading.Event()
        cls.powercap_writer = threading.Thread(target=cls.write_energy, daemon=True)
        cls.write_energy_once(0)
        cls.powercap_writer.start()
        cls.trainbench = subprocess.Popen(
            [os.path.join(BIN, "trainbench"), "run", config, "--out", os.path.join(cls.tmp, "out"),
             "--metrics-addr", f"127.0.0.1:{cls.metrics_port}", "--metrics-linger", "120"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, TRAINBENCH_POWERCAP_ROOT=cls.powercap))
        with open(os.path.join(cls.tmp, "prometheus.yml"), "w") as f:
            f.write(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: trainbench
    static_configs: [{{targets: ["127.0.0.1:{cls.metrics_port}"]}}]
""")
        cls.prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={cls.tmp}/prometheus.yml", f"--storage.tsdb.path={cls.tmp}/tsdb",
             f"--web.listen-address=127.0.0.1:{cls.prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(cls.tmp, "prometheus.log"), "w"))
        cls.api = f"http://127.0.0.1:{cls.prom_port}/api/v1"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                targets = json.loads(get(cls.api + "/targets"))["data"]["activeTargets"]
                if targets and targets[0]["health"] == "up":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the trainbench target never came up in Prometheus")
        cls.start = time.time()

    @classmethod
    def write_energy_once(cls, uj):
        path = os.path.join(cls.powercap, "intel-rapl:0", "energy_uj")
        with open(path + ".tmp", "w") as f:
            f.write(f"{uj}\n")
        os.rename(path + ".tmp", path)

    @classmethod
    def write_energy(cls):
        uj = 0
        while not cls.powercap_done.wait(0.05):
            uj += 1000000  # 1 J every 50 ms
            cls.write_energy_once(uj)

    @classmethod
    def tearDownClass(cls):
        cls.powercap_done.set()
        for p in (cls.trainbench, cls.prometheus):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def query(self, expr):
        url = self.api + "/query?" + urllib.parse.urlencode({"query": expr})
        return json.loads(get(url))["data"]["result"]

    def query_range(self, expr):
        end = time.time()
        url = self.api + "/query_range?" + urllib.parse.urlencode(
            {"query": expr, "start": self.start - 5, "end": end, "step": "1"})
        body = json.loads(get(url))
        self.assertEqual(body["status"], "success", expr)
        return body["data"]["result"]

    def wait_until_finished(self):
        results = os.path.join(self.tmp, "out", "results.json")
        deadline = time.time() + 240
        while time.time() < deadline:
            if os.path.exists(results):
                cells = json.load(open(results))["cells"]
                if all(c["status"] not in ("pending",) for c in cells) and all("index" in c for c in cells):
                    return cells
            time.sleep(1)
        self.fail("the run did not finish in time")

    def test_1_metrics_arrive_and_change_while_training(self):
        def samples():
            r = self.query('sum(trainbench_samples_total{experiment="promtest"})')
            return float(r[0]["value"][1]) if r else 0.0
        deadline = time.time() + 60
        while samples() == 0 and time.time() < deadline:
            time.sleep(0.5)
        first = samples()
        self.assertGreater(first, 0)
        time.sleep(3)
        self.assertGreater(samples(), first, "samples_total did not grow while training")
        self.assertTrue(self.query('trainbench_info{experiment="promtest"}'))

    def test_2_promtool_accepts_the_scraped_metrics(self):
        text = get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        self.assertIn("trainbench_step_duration_seconds_bucket", text)
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        problems = [l for l in (check.stdout + check.stderr).splitlines()
                    if l.strip() and not l.startswith("exposer_")]  # prometheus-cpp's own
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertEqual(problems, [])

    def test_3_port_in_use_is_a_one_line_error_before_training(self):
        t0 = time.time()
        r = subprocess.run([os.path.join(BIN, "trainbench"), "run", os.path.join(self.tmp, "exp.yaml"),
                            "--out", os.path.join(self.tmp, "out2"), "--metrics-addr", f"127.0.0.1:{self.metrics_port}"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"metrics address 127.0.0.1:{self.metrics_port}: cannot listen", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out2", "results.json")))
        self.assertLess(time.time() - t0, 30)

    def test_5_the_run_state_tells_a_finished_run(self):
        self.wait_until_finished()
        # The state gauge flips once OnRunFinished has run, just after the last cell.
        deadline = time.time() + 30
        text = ""
        while time.time() < deadline:
            text = get(f"http://127.0.0.1:{self.metrics_port}/metrics")
            if 'trainbench_run_state{experiment="promtest",state="finished"} 1' in text:
                break
            time.sleep(0.5)
        self.assertIn('trainbench_run_state{experiment="promtest",state="finished"} 1', text)
        self.assertIn('trainbench_run_state{experiment="promtest",state="running"} 0', text)
        start = [l for l in text.splitlines() if l.startswith("trainbench_run_start_timestamp_seconds{")]
        last = [l for l in text.splitlines() if l.startswith("trainbench_last_progress_timestamp_seconds{")]
        self.assertTrue(start and last, text)
        self.assertLessEqual(float(start[0].split()[-1]), float(last[0].split()[-1]))
        self.assertLess(abs(time.time() - float(last[0].split()[-1])), 600)

    def test_4_every_dashboard_panel_returns_data(self):
        cells = self.wait_until_finished()
        self.assertTrue(all(c["status"] == "ok" for c in cells), cells)
        time.sleep(3)  # a few scrapes of the final values
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        has_gpu = bool(self.query("trainbench_gpu_utilization_ratio"))
        fill = {"$experiment": "promtest", "$model": ".*", "$device_type": ".*", "$instance": ".*",
                "$__rate_interval": "4s"}
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for k, v in fill.items():
                    expr = expr.replace(k, v)
                if "trainbench_gpu_" in expr and not has_gpu and "or vector(0)" not in expr:
                    # Empty here: the panel must say why rather than stay blank.
                    with self.subTest(panel=panel["title"]):
                        self.assertIn("no GPU", panel["fieldConfig"]["defaults"].get("noValue", ""), panel["title"])
                    continue
                with self.subTest(panel=panel["title"], expr=expr):
                    self.assertTrue(self.query_range(expr), f"{panel['title']}: no data for {expr}")
        # Without a GPU the GPU count reads 0, which the panel maps to "no GPU".
        if not has_gpu:
            gpus = next(p for p in dashboard["panels"] if p["title"] == "GPUs sampled")
            expr = gpus["targets"][0]["expr"]
            for k, v in fill.items():
                expr = expr.replace(k, v)
            self.assertEqual(self.query(expr)[0]["value"][1], "0")
        # The run's remaining time is 0 once it finished; accelerators are told apart.
        self.assertEqual(self.query('trainbench_run_remaining_seconds{experiment="promtest"}')[0]["value"][1], "0")
        accel = self.query('trainbench_device_accelerator{experiment="promtest"}')
        self.assertEqual(sorted(r["metric"]["variant"] for r in accel), ["cpu", "cpu-1thread", "cpu-2ranks"])
        self.assertTrue(all(r["value"][1] == "0" for r in accel), accel)
        # The dashboard's variables resolve too.
        for var in dashboard["templating"]["list"][1:]:
            q = var["query"]["query"]
            inner = q[len("label_values("):-1].rsplit(",", 1)[0].replace("$instance", ".*").replace("$experiment", "promtest")
            self.assertTrue(self.query(inner), q)


class PrometheusScrapesWithCredentials(unittest.TestCase):
    """/metrics behind HTTP basic authentication, over HTTP and over TLS:
    client checks (401 without or with wrong credentials, 200 with them; over
    TLS, a client that does not trust the certificate or speaks plain HTTP
    gets nothing), then a real Prometheus scraping with the credentials (and
    the CA); the password never shows in logs or results."""

    PASSWORD = "tb-Secret-8731"

    def test_basic_authentication(self):
        self.scrape_with_credentials(tls=False)

    def test_tls_with_basic_authentication(self):
        self.scrape_with_credentials(tls=True)

    def scrape_with_credentials(self, tls):
        import base64
        import ssl
        tmp = tempfile.mkdtemp(prefix="tb-auth-")
        try:
            port, prom_port = free_port(), free_port()
            with open(os.path.join(tmp, "password"), "w") as f:
                f.write(self.PASSWORD + "\n")
            tls_yaml = ""
            if tls:
                subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                                "-keyout", os.path.join(tmp, "key.pem"), "-out", os.path.join(tmp, "cert.pem"),
                                "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                tls_yaml = ", tls: {cert_file: cert.pem, key_file: key.pem}"
            write_small_experiment(tmp, "authtest", 20,
                                   f"metrics: {{basic_auth: {{username: prom, password_file: password}}{tls_yaml}}}\n")
            log = open(os.path.join(tmp, "trainbench.log"), "w")
            run = subprocess.Popen([os.path.join(BIN, "trainbench"), "run", os.path.join(tmp, "exp.yaml"),
                                    "--out", os.path.join(tmp, "out"), "--metrics-addr", f"127.0.0.1:{port}",
                                    "--metrics-linger", "60"], stdout=log, stderr=subprocess.STDOUT)
            scheme = "https" if tls else "http"
            url = f"{scheme}://127.0.0.1:{port}/metrics"
            trusted = ssl.create_default_context(cafile=os.path.join(tmp, "cert.pem")) if tls else None

            def status(user=None, password=None, context=trusted, address=url):
                request = urllib.request.Request(address)
                if user is not None:
                    token = base64.b64encode(f"{user}:{password}".encode()).decode()
                    request.add_header("Authorization", "Basic " + token)
                try:
                    with urllib.request.urlopen(request, timeout=5, context=context) as r:
                        return r.status
                except urllib.error.HTTPError as e:
                    return e.code

            wait_until_answers(status)
            self.assertEqual(status(), 401)
            self.assertEqual(status("prom", "wrong"), 401)
            self.assertEqual(status("someone", self.PASSWORD), 401)
            self.assertEqual(status("prom", self.PASSWORD), 200)
            if tls:
                def curl(*args):
                    return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *args, url],
                                          capture_output=True, text=True).stdout
                self.assertEqual(curl("--cacert", os.path.join(tmp, "cert.pem"), "-u", f"prom:{self.PASSWORD}"), "200")
                self.assertEqual(curl("--cacert", os.path.join(tmp, "cert.pem"), "-u", "prom:wrong"), "401")
                self.assertEqual(curl("-u", f"prom:{self.PASSWORD}"), "000")  # curl does not trust it
                with self.assertRaises(OSError):  # certificate not trusted
                    status("prom", self.PASSWORD, context=ssl.create_default_context())
                with self.assertRaises(OSError):  # plain HTTP to the TLS port
                    status("prom", self.PASSWORD, context=None, address=f"http://127.0.0.1:{port}/metrics")

            tls_config = f"\n    scheme: https\n    tls_config: {{ca_file: {tmp}/cert.pem}}" if tls else ""
            with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
                f.write(f"""global: {{scrape_interval: 1s}}
scrape_configs:
  - job_name: trainbench
    basic_auth: {{username: prom, password_file: {tmp}/password}}{tls_config}
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
""")
            prom = subprocess.Popen(["prometheus", f"--config.file={tmp}/prometheus.yml",
                                     f"--storage.tsdb.path={tmp}/tsdb", f"--web.listen-address=127.0.0.1:{prom_port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline, up, samples = time.time() + 60, False, []
                while time.time() < deadline and not (up and samples):
                    try:
                        r = json.loads(get(f"http://127.0.0.1:{prom_port}/api/v1/query?query=up"))["data"]["result"]
                        up = bool(r) and r[0]["value"][1] == "1"
                        samples = json.loads(get(f"http://127.0.0.1:{prom_port}/api/v1/query?query=trainbench_info"))["data"]["result"]
                    except OSError:
                        pass
                    time.sleep(0.5)
                self.assertTrue(up, f"Prometheus could not scrape {scheme} with the credentials")
                self.assertTrue(samples, "no trainbench_info scraped")
            finally:
                prom.terminate()
                prom.wait(30)
            run.send_signal(signal.SIGINT)
            run.wait(60)
            log.close()
            for root, _, files in os.walk(tmp):
                for name in files:
                    if name == "password" or root.startswith(os.path.join(tmp, "tsdb")):
                        continue
                    with open(os.path.join(root, name), errors="replace") as f:
                        self.assertNotIn(self.PASSWORD, f.read(), os.path.join(root, name))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class PushgatewayReceivesTheFinalValues(unittest.TestCase):
    """--metrics-push: a run too short to scrape pushes its final values to a
    real Pushgateway (Debian's prometheus-pushgateway)."""

    def test_push(self):
        if shutil.which("prometheus-pushgateway") is None:
            raise RuntimeError("prometheus-pushgateway not found: install Debian's 'prometheus-pushgateway' package")
        tmp = tempfile.mkdtemp(prefix="tb-push-")
        port = free_port()
        gateway = subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until_answers(lambda: get(f"http://127.0.0.1:{port}/metrics"))
            write_small_experiment(tmp, "pushtest", 5)
            r = subprocess.run([os.path.join(BIN, "trainbench"), "run", os.path.join(tmp, "exp.yaml"), "--out",
                                os.path.join(tmp, "out"), "--metrics-push", f"http://127.0.0.1:{port}"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("metrics pushed to", r.stderr)
            pushed = get(f"http://127.0.0.1:{port}/metrics")
            lines = [l for l in pushed.splitlines() if l.startswith("trainbench_samples_total{")]
            self.assertTrue(lines, pushed[:2000])
            self.assertIn('job="trainbench"', lines[0])
            self.assertIn('experiment="pushtest"', lines[0])
            self.assertEqual(float(lines[0].rsplit(" ", 1)[1]), 5 * 128.0)  # 5 steps of 128
        finally:
            gateway.terminate()
            gateway.wait(30)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
