"""Compares the kernels of two captured CUDA graphs (Graphviz files written by
CUDAGraph::debug_dump / torch.cuda.CUDAGraph.debug_dump): node kinds, and
kernel launches per kernel function, side by side.
  python3 bench/graph_kernels.py A.dot B.dot"""
import collections, re, subprocess, sys

def nodes(path):
    text = open(path, errors="replace").read()
    kinds, kernels = collections.Counter(), collections.Counter()
    for m in re.finditer(r'shape="record" label="\{(.*?)\}"\];', text, re.S):
        label = m.group(1)
        kind = re.search(r"(KERNEL|MEMSET|MEMCPY|EVENT_RECORD|WAIT_EVENT|EMPTY|HOST|MEM_ALLOC|MEM_FREE)", label)
        kinds[kind.group(1) if kind else "OTHER"] += 1
        if kind and kind.group(1) == "KERNEL":
            name = re.search(r"topoId: \d+\) \| (.*?)\\<\\<\\<", label, re.S)
            kernels[name.group(1).strip() if name else label[:80]] += 1
    return kinds, kernels

def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
        # Template arguments and parameter lists make names long: keep the
        # qualified name and the first template argument.
        return {n: re.sub(r"\(anonymous namespace\)::", "", d)[:110] for n, d in zip(names, out)}
    except OSError:
        return {n: n[:110] for n in names}

(ka, a), (kb, b) = nodes(sys.argv[1]), nodes(sys.argv[2])
print(f"nodes: {sys.argv[1]}: {dict(ka)} total {sum(ka.values())}")
print(f"nodes: {sys.argv[2]}: {dict(kb)} total {sum(kb.values())}")
names = demangle(sorted(set(a) | set(b)))
ca, cb = collections.Counter(), collections.Counter()
for n, c in a.items(): ca[names[n]] += c
for n, c in b.items(): cb[names[n]] += c
print(f"{'kernel':110s} {'A':>5s} {'B':>5s}")
for n in sorted(set(ca) | set(cb), key=lambda n: -(abs(ca[n] - cb[n]))):
    if ca[n] != cb[n]:
        print(f"{n:110s} {ca[n]:5d} {cb[n]:5d}")
print(f"kernels with equal counts: {sum(1 for n in set(ca) | set(cb) if ca[n] == cb[n])}")
