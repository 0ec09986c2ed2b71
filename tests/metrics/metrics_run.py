"""A `trainbench run` serving /metrics, as the metrics tests start it."""
import os, socket, ssl, subprocess, time, urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_args(bin_dir, config, out, port, tls, linger, folder):
    """The command line of a run of `config` into `out` serving /metrics on
    127.0.0.1:`port` (over TLS with a self-signed certificate made in
    `folder`), lingering `linger` seconds; and the URL and SSL context to
    scrape it with."""
    args = [os.path.join(bin_dir, "trainbench"), "run", config, "--out", out, "--concurrent",
            "--metrics-addr", f"127.0.0.1:{port}", "--metrics-linger", str(linger)]
    if tls:
        key, cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True)
        args += ["--metrics-tls-cert", cert, "--metrics-tls-key", key]
    context = ssl._create_unverified_context() if tls else None
    return args, f"{'https' if tls else 'http'}://127.0.0.1:{port}/metrics", context


def wait_until_served(url, context, alive, seconds=60):
    """Scrapes `url` until it answers; raises once `seconds` have passed or
    `alive()` says the run has ended."""
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=5, context=context).read()
            return
        except OSError:
            if time.time() > deadline or not alive():
                raise
            time.sleep(0.3)
