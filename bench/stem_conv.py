#!/usr/bin/env python3
"""The ResNet stem's 7x7 stride-2 convolution on 3 channels, timed in plain
PyTorch (cuDNN autotuned, bf16, channels_last) against the same arithmetic
rearranged (space-to-depth: each 2x2 block of pixels becomes 12 channels, the
7x7 stride-2 filter a 4x4 stride-1 filter over them, padded to 16 channels),
forward and weight gradient (the stem's input needs no gradient), on a GPU.

  python3 bench/stem_conv.py [--batches 128 1024] [--size 32] [--repeats 5]

Prints the median us per forward + backward of each variant and checks that
the rearranged convolution gives the same output and weight gradient.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def space_to_depth_input(x, channels):
    """x (N, 3, H, W) -> (N, channels, OH + 3, OW + 3): block rows b = -2..OH,
    channel (ry * 2 + rx) * 3 + c = x[c, 2b + ry, 2b' + rx] (zero outside)."""
    n, c, h, w = x.shape
    oh, ow = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    padded = F.pad(x, (4, 2 * (ow + 1) - w, 4, 2 * (oh + 1) - h))  # rows -4 .. 2 OH + 1
    s = padded.reshape(n, c, oh + 3, 2, ow + 3, 2).permute(0, 3, 5, 1, 2, 4).reshape(n, 4 * c, oh + 3, ow + 3)
    return F.pad(s, (0, 0, 0, 0, 0, channels - 4 * c))


def space_to_depth_weight(w, channels):
    """w (K, 3, 7, 7) -> (K, channels, 4, 4): taps k' = k + 1 = 2 j + r."""
    k, c = w.shape[:2]
    padded = F.pad(w, (1, 0, 1, 0))  # (K, C, 8, 8), tap 0 zero
    s = padded.reshape(k, c, 4, 2, 4, 2).permute(0, 3, 5, 1, 2, 4).reshape(k, 4 * c, 4, 4)
    return F.pad(s, (0, 0, 0, 0, 0, channels - 4 * c))


def timed(step, iterations=50, repeats=5):
    for _ in range(10):
        step()
    figures = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            step()
        end.record()
        torch.cuda.synchronize()
        figures.append(start.elapsed_time(end) * 1e3 / iterations)
    return statistics.median(figures)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--size", type=int, nargs="+", default=[32])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    dtype = torch.bfloat16
    cl = torch.channels_last
    print("| batch | size | variant | us fwd+wgrad | us fwd |")
    print("|---|---|---|---|---|")
    for size in args.size:
        for batch in args.batches:
            x = torch.randn(batch, 3, size, size, device="cuda", dtype=dtype).contiguous(memory_format=cl)
            w = (torch.randn(64, 3, 7, 7, device="cuda", dtype=dtype) * 0.1).contiguous(memory_format=cl)
            w.requires_grad_(True)
            y_ref = F.conv2d(x, w, stride=2, padding=3)
            dy = torch.randn_like(y_ref)
            (g_ref,) = torch.autograd.grad(y_ref, w, dy)
            variants = {"7x7 s2, 3 channels": (x, w, 2, 3, None)}
            x8 = F.pad(x, (0, 0, 0, 0, 0, 5)).contiguous(memory_format=cl)
            w8 = F.pad(w.detach(), (0, 0, 0, 0, 0, 5)).contiguous(memory_format=cl).requires_grad_(True)
            variants["7x7 s2, padded to 8 channels"] = (x8, w8, 2, 3, None)
            for channels in (12, 16):
                s = space_to_depth_input(x, channels).contiguous(memory_format=cl)
                ws = space_to_depth_weight(w.detach(), channels).contiguous(memory_format=cl).requires_grad_(True)
                variants[f"space-to-depth 4x4 s1, {channels} channels"] = (s, ws, 1, 0, channels)
            for name, (xi, wi, stride, pad, channels) in variants.items():
                y = F.conv2d(xi, wi, stride=stride, padding=pad)
                assert y.shape == y_ref.shape, (name, y.shape)
                err = (y.float() - y_ref.float()).abs().max().item()
                scale = y_ref.float().abs().max().item()
                if channels:
                    (g,) = torch.autograd.grad(y, wi, dy)
                    g_back = g.float()[:, :12].reshape(64, 2, 2, 3, 4, 4).permute(0, 3, 4, 1, 5, 2).reshape(64, 3, 8, 8)
                    gerr = (g_back[:, :, 1:, 1:] - g_ref.float()).abs().max().item()
                else:
                    gerr = 0.0
                assert err <= 2e-2 * scale, (name, err, scale)
                assert gerr <= 2e-2 * g_ref.float().abs().max().item(), (name, gerr)

                def step():
                    out = F.conv2d(xi, wi, stride=stride, padding=pad)
                    torch.autograd.grad(out, wi, dy)

                def fwd():
                    with torch.no_grad():
                        F.conv2d(xi, wi, stride=stride, padding=pad)

                print(f"| {batch} | {size} | {name} | {timed(step, repeats=args.repeats):.1f} | "
                      f"{timed(fwd, repeats=args.repeats):.1f} |", flush=True)


if __name__ == "__main__":
    main()
