#!/usr/bin/env python3
"""Side-by-side throughput: shardlab's train_bench vs the PyTorch reference trainer, fp32 and bf16.

Runs, in one session and alternating so machine noise hits all alike, REPS repetitions of
    train_bench --model llama-<preset> --dtype float32|bfloat16   (shardlab, one device)
    torch_llama.py --preset <preset> --arch llama [--autocast-bf16] (PyTorch, python3-torch)
with the same threads (2), then prints medians and ratios as a Markdown table.

shardlab runs as a user runs it: the caller's environment, nothing forced (OPENBLAS_CORETYPE
included: shardlab chooses its OpenBLAS core from the CPU's features, keeping the caller's
only when it is at least as strong). PyTorch gets its best documented setting
(../shared/bench/README.md): OPENBLAS_CORETYPE set to the strongest core this CPU runs (as
train_bench --peak-only reports it: blas_best), GOMP_SPINCOUNT=0, and its best allocator.

shardlab bf16 is MaxText's mixed precision (dtype=bfloat16, weight_dtype=grad_dtype=float32);
PyTorch bf16 is torch.autocast("cpu", dtype=torch.bfloat16) over the forward pass and the loss,
fp32 parameters and optimizer. PyTorch runs with its best allocator setting on these machines
(../shared/bench/README.md, "The allocator trap"): tcmalloc for llama-small, the glibc
tunables for llama-tiny (--torch-alloc overrides; falls back to the tunables when tcmalloc is
not installed). An engine that allocates nothing in a step needs no such setting.

The sgemm peak and the bf16 matmul peak (Bf16MatmulPlan: the engine's avx512_bf16 GEMM, or
oneDNN) are measured once at the start by train_bench --peak-only and passed to every run, so
MFU uses the same denominators: it is reported over both (model FLOPs of torch_llama.py's
formula / peak).

A shardlab run that fails (e.g. an engine without dtype=bfloat16) is reported as such in its
row, with train_bench's message; the other rows still run.

usage: bench/compare_torch.py [--build build] [--reps 3] [--presets tiny,small]
       [--dtypes f32,bf16] [--torch-alloc best|glibc|tunables|tcmalloc]
       [--skip-torch]          (shardlab only: its fp32 and bf16 rows and their ratio; e.g. on
                                a CPU without AVX-512, where PyTorch 1.13's bf16 autocast falls
                                to reference kernels and one llama-tiny run takes > 15 minutes)
       [--torch-script PATH]   (default: shared/bench/torch_llama.py in the repo's parent or
                                its parent, i.e. beside the checkout or beside its worktree dir)
"""
import argparse
import ctypes.util
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

GLIBC_TUNABLES = ("glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold="
                  "68719476736:glibc.malloc.top_pad=1073741824")
TCMALLOC = "libtcmalloc_minimal.so.4"
BEST_ALLOC = {"tiny": "tunables", "small": "tcmalloc"}  # the README's measured best
STEPS = {"tiny": ("10", "3"), "small": ("5", "2")}


def clean_env(extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OPENBLAS_", "GOMP_", "OMP_")) or k in ("LD_PRELOAD", "GLIBC_TUNABLES"):
            env.pop(k)
    env.update(extra)
    return env


def have_tcmalloc():
    try:
        ctypes.CDLL(TCMALLOC)
        return True
    except OSError:
        return False


def alloc_env(setting):
    if setting == "tcmalloc":
        return {"LD_PRELOAD": TCMALLOC}
    if setting == "tunables":
        return {"GLIBC_TUNABLES": GLIBC_TUNABLES}
    return {}


def last_json(out):
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in output:\n" + out)


def run_json(cmd, env):
    """The last JSON line of a run, or {"error": message} when it fails."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return {"error": msg[-1] if msg else f"exit {p.returncode}"}
    return last_json(p.stdout)


def fmt_tps(v):
    return f"{v:.0f}" if v else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--torch-alloc", default="best",
                    choices=["best", "glibc", "tunables", "tcmalloc"])
    candidates = [os.path.join(REPO, up, "shared", "bench", "torch_llama.py")
                  for up in ("..", os.path.join("..", ".."))]
    ap.add_argument("--torch-script",
                    default=next((c for c in candidates if os.path.exists(c)), candidates[0]))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bench", "train_bench")
    # As a user runs it: the caller's environment; only the thread count matches torch's.
    ours_env = dict(os.environ, SHARDLAB_NUM_THREADS="2")
    dtypes = a.dtypes.split(",")

    peaks = run_json([bench, "--peak-only"], ours_env)
    if "error" in peaks:
        sys.exit(f"train_bench --peak-only failed: {peaks['error']}")
    peak, bf16_peak = peaks["sgemm_peak_gflops"], peaks.get("bf16_peak_gflops", 0.0)
    best_core = peaks.get("blas_best", "Haswell")
    print(f"CPU: {peaks.get('cpu', '?')}; shardlab's OpenBLAS core: {peaks.get('blas_core', '?')} "
          f"(this CPU's best: {best_core}); PyTorch runs with OPENBLAS_CORETYPE={best_core}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    if "theoretical_peak_gflops" in peaks:
        print(f"theoretical f32 peak of the cores in use: {peaks['theoretical_peak_gflops']:.1f} "
              f"GFLOP/s (clock {peaks.get('clock_ghz', 0):.2f} GHz)")
    if "theoretical_bf16_peak_gflops" in peaks:
        print(f"theoretical bf16 matmul peak of the path in use: "
              f"{peaks['theoretical_bf16_peak_gflops']:.1f} GFLOP/s")
    print(f"sgemm peak (kern::matmul, 2 threads, best median of LM shapes): {peak:.1f} GFLOP/s")
    print(f"bf16 matmul peak (Bf16MatmulPlan, same shapes): {bf16_peak:.1f} GFLOP/s", flush=True)

    rows, notes = [], []
    for preset in a.presets.split(","):
        n, w = STEPS[preset]
        alloc = BEST_ALLOC[preset] if a.torch_alloc == "best" else a.torch_alloc
        if alloc == "tcmalloc" and not have_tcmalloc():
            notes.append(f"{TCMALLOC} not installed: PyTorch ran with the glibc tunables instead")
            alloc = "tunables"
        torch_env = clean_env({"OPENBLAS_CORETYPE": best_core, "GOMP_SPINCOUNT": "0",
                               **alloc_env(alloc)})
        runs = {(who, dt): [] for who in ("shardlab", "torch") for dt in dtypes}
        errors = {}
        fpt = None
        for r in range(a.reps):
            for dt in dtypes:
                o = run_json([bench, "--model", f"llama-{preset}", "--steps", n, "--warmup", w,
                              "--dtype", "bfloat16" if dt == "bf16" else "float32",
                              "--peak-gflops", str(peak), "--bf16-peak-gflops", str(bf16_peak)],
                             ours_env)
                t = {"error": "skipped (--skip-torch)"} if a.skip_torch else run_json(
                    [a.python, a.torch_script, "--preset", preset, "--arch", "llama",
                     "--steps", n, "--warmup", w, "--threads", "2", "--json"] +
                    (["--autocast-bf16"] if dt == "bf16" else []), torch_env)
                for who, res in (("shardlab", o), ("torch", t)):
                    if "error" in res:
                        errors[(who, dt)] = res["error"]
                    else:
                        runs[(who, dt)].append(res["tokens_per_s"])
                        fpt = fpt or res.get("flops_per_token")
                print(f"{preset} {dt} rep {r}: shardlab {o.get('tokens_per_s', o.get('error'))}, "
                      f"torch {t.get('tokens_per_s', t.get('error'))} (alloc {alloc})", flush=True)
        med = {k: statistics.median(v) if v else 0.0 for k, v in runs.items()}
        for dt in dtypes:
            rows.append((preset, dt, alloc, med[("shardlab", dt)], med[("torch", dt)], fpt))
        for (who, dt), e in errors.items():
            notes.append(f"llama-{preset} {who} {dt}: {e}")
        if "f32" in dtypes and "bf16" in dtypes and med[("shardlab", "f32")] and med[("shardlab", "bf16")]:
            s = med[("shardlab", "bf16")] / med[("shardlab", "f32")]
            notes.append(f"llama-{preset}: shardlab bf16 / shardlab fp32 = {s:.2f}x")

    print()
    print("| model | dtype | shardlab tok/s | MFU fp32 peak | MFU bf16 peak | torch tok/s "
          "(alloc) | torch MFU fp32 peak | torch MFU bf16 peak | shardlab / torch |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for preset, dt, alloc, mo, mt, fpt in rows:
        g = lambda v: v * fpt / 1e9 if fpt else 0.0  # noqa: E731
        mfu = lambda v, p: f"{100 * g(v) / p:.0f}%" if v and p else "n/a"  # noqa: E731
        ratio = f"{mo / mt:.2f}x" if mo and mt else "n/a"
        print(f"| llama-{preset} | {dt} | {fmt_tps(mo)} | {mfu(mo, peak)} | {mfu(mo, bf16_peak)} | "
              f"{fmt_tps(mt)} ({alloc}) | {mfu(mt, peak)} | {mfu(mt, bf16_peak)} | {ratio} |")
    print(f"\n(medians of {a.reps} alternating runs; sgemm peak {peak:.0f} GFLOP/s, bf16 matmul "
          f"peak {bf16_peak:.0f} GFLOP/s; MFU = model FLOPs (torch_llama.py formula) / peak; "
          f"load average at the end {os.getloadavg()[0]:.2f})")
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    sys.exit(main())
