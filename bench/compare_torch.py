#!/usr/bin/env python3
"""Side-by-side throughput: shardlab's train_bench vs the PyTorch reference trainer.

Runs, in one session and alternating so machine noise hits both alike, REPS repetitions of
    train_bench --model llama-<preset>             (shardlab, one simulated device)
    torch_llama.py --preset <preset> --arch llama  (PyTorch, Debian's python3-torch)
with the same threads (2) and the same BLAS kernels (OpenBLAS SkylakeX; GOMP_SPINCOUNT=0 for
torch, its best setting on 2 cores), then prints medians and the ratio as a
Markdown table. The sgemm peak is measured once at the start by train_bench --peak-only and
passed to both, so MFU uses one denominator.

usage: bench/compare_torch.py [--build build] [--reps 3] [--presets tiny,small]
       [--torch-script PATH]   (default: ../shared/bench/torch_llama.py beside the repo)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def clean_env(extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OPENBLAS_", "GOMP_", "OMP_")):
            env.pop(k)
    env.update(extra)
    return env


def last_json(out):
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in output:\n" + out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--torch-script",
                    default=os.path.join(REPO, "..", "shared", "bench", "torch_llama.py"))
    ap.add_argument("--python", default="/usr/bin/python3")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bench", "train_bench")
    ours_env = clean_env({"SHARDLAB_NUM_THREADS": "2", "SHARDLAB_OPENBLAS_CORETYPE": "SkylakeX"})
    torch_env = clean_env({"OPENBLAS_CORETYPE": "SkylakeX", "GOMP_SPINCOUNT": "0"})

    out = subprocess.run([bench, "--peak-only"], env=ours_env, capture_output=True, text=True,
                         check=True).stdout
    peak = last_json(out)["sgemm_peak_gflops"]
    print(f"sgemm peak (kern::matmul, 2 threads, best median of LM shapes): {peak:.1f} GFLOP/s",
          flush=True)
    steps = {"tiny": ("10", "3"), "small": ("5", "2")}
    rows = []
    for preset in a.presets.split(","):
        n, w = steps[preset]
        ours, theirs = [], []
        for r in range(a.reps):
            o = last_json(subprocess.run(
                [bench, "--model", f"llama-{preset}", "--steps", n, "--warmup", w,
                 "--peak-gflops", str(peak)], env=ours_env, capture_output=True, text=True,
                check=True).stdout)
            t = last_json(subprocess.run(
                [a.python, a.torch_script, "--preset", preset, "--arch", "llama", "--steps", n,
                 "--warmup", w, "--threads", "2", "--json"], env=torch_env, capture_output=True,
                text=True, check=True).stdout)
            ours.append(o["tokens_per_s"])
            theirs.append(t["tokens_per_s"])
            print(f"{preset} rep {r}: shardlab {o['tokens_per_s']:.0f} tok/s, "
                  f"torch {t['tokens_per_s']:.0f} tok/s", flush=True)
        fpt = o["flops_per_token"]
        mo, mt = statistics.median(ours), statistics.median(theirs)
        rows.append((preset, mo, mo * fpt / 1e9, 100 * mo * fpt / 1e9 / peak, mt,
                     mt * fpt / 1e9, 100 * mt * fpt / 1e9 / peak, mo / mt))
    print()
    print(f"| model | shardlab tok/s | GFLOP/s | MFU | torch tok/s | GFLOP/s | MFU | ratio |")
    print(f"|---|---:|---:|---:|---:|---:|---:|---:|")
    for p, mo, go, fo, mt, gt, ft, ratio in rows:
        print(f"| llama-{p} | {mo:.0f} | {go:.0f} | {fo:.0f}% | {mt:.0f} | {gt:.0f} | {ft:.0f}% | "
              f"{ratio:.2f}x |")
    print(f"\n(medians of {a.reps} alternating runs; sgemm peak {peak:.0f} GFLOP/s; "
          f"MFU = model FLOPs (torch_llama.py formula) / peak)")


if __name__ == "__main__":
    sys.exit(main())
