#!/usr/bin/env python3
"""What many concurrent scrapers cost a training run, measured side by side.

Runs the same CPU experiment twice in one go: once unscraped, once while N
threads fetch /metrics as fast as they can for the whole run. Prints
samples/s of both, their ratio, and the scrapes served (and failed).
Usage: scrape_load.py BUILD_DIR DATA_DIR [SCRAPERS=16] [REPEATS=3] [INTERVAL=0]
INTERVAL: seconds each scraper waits between scrapes (0: as fast as it can)."""
import json, os, socket, statistics, subprocess, sys, tempfile, threading, time, urllib.request

BUILD, DATA = sys.argv[1], sys.argv[2]
SCRAPERS = int(sys.argv[3]) if len(sys.argv) > 3 else 16
REPEATS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
INTERVAL = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
tmp = tempfile.mkdtemp(prefix="tb-load-")
config = os.path.join(tmp, "exp.yaml")
with open(config, "w") as f:
    f.write(f"""name: scrapeload
dataset: {{kind: cifar10, path: {DATA}}}
models: [resnet18]
devices: [cpu]
training: {{epochs: 1, batch_size: 64}}
measurement: {{warmup_steps: 3, max_steps: 25}}
""")

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def run(loaded):
    port = free_port(); out = os.path.join(tmp, f"out-{loaded}-{time.time()}")
    p = subprocess.Popen([os.path.join(BUILD, "bin", "trainbench"), "run", config, "--out", out,
                          "--metrics-addr", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    served, failed, stop = [0], [0], threading.Event()
    def scrape():
        while not stop.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    r.read(); served[0] += 1
                stop.wait(INTERVAL)
            except OSError:
                if served[0] > 0:  # refusals before the exporter listens are not failures
                    failed[0] += 1
                time.sleep(0.05)
    threads = [threading.Thread(target=scrape) for _ in range(SCRAPERS if loaded else 0)]
    for t in threads: t.start()
    p.wait(); stop.set()
    for t in threads: t.join()
    cell = json.load(open(os.path.join(out, "results.json")))["cells"][0]
    return cell["samples_per_second"], served[0], failed[0]

quiet, loaded, served = [], [], []
for _ in range(REPEATS):  # interleaved, so drift hits both alike
    quiet.append(run(False)[0])
    sps, ok, bad = run(True); loaded.append(sps); served.append((ok, bad))
q, l = statistics.median(quiet), statistics.median(loaded)
print(f"resnet18 on cpu, {os.cpu_count()} cores, {SCRAPERS} concurrent scrapers "
      f"({'flat out' if INTERVAL == 0 else f'each every {INTERVAL} s'}), {REPEATS} runs each (medians)")
print(f"unscraped: {q:.1f} samples/s   scraped: {l:.1f} samples/s   ratio {l / q:.3f}")
print("scrapes served / failed per loaded run:", served)
