#!/usr/bin/python3
"""Plots ringtrain metrics (JSONL, one object per step) as a PNG: training loss and val bpb
against step and against tokens. Several files give several curves (e.g. sync modes).
Needs only Python's standard library (tools/plot/png_plot.py draws and encodes the PNG).

  /usr/bin/python3 tools/plot/plot_metrics.py runs/demo/metrics.jsonl --out runs/demo/curves.png
  /usr/bin/python3 tools/plot/plot_metrics.py grad.jsonl avg.jsonl --label grad --label avg --out cmp.png
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from png_plot import Axes, Canvas, text_width  # noqa: E402


def load(path):
    train, evals = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                sys.exit(f"plot: {path}:{n} is not JSON; pass a --metrics file written by ringtrain train")
            if "val_bpb" in rec:
                evals.append(rec)
            elif "loss" in rec:
                train.append(rec)
    if not train and not evals:
        sys.exit(f"plot: {path} has no step records; pass a --metrics file written by ringtrain train")
    return train, evals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", nargs="+", help="metrics JSONL files")
    ap.add_argument("--label", action="append", default=[], help="one label per file")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="ringtrain")
    args = ap.parse_args()
    if args.label and len(args.label) != len(args.metrics):
        sys.exit("plot: give one --label per metrics file, or none")

    # Four panels as before: train loss (top) and val bpb (bottom), against step and tokens.
    canvas = Canvas(1200, 800)
    axes = [[Axes(canvas, 110 + col * 600, 70 + row * 370, 460, 270) for col in range(2)] for row in range(2)]
    for i, path in enumerate(args.metrics):
        label = args.label[i] if args.label else os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        train, evals = load(path)
        for col, key in enumerate(("step", "tokens")):
            if train and key in train[0]:
                axes[0][col].plot([r[key] for r in train], [r["loss"] for r in train], label)
            if evals and key in evals[0]:
                axes[1][col].plot([r[key] for r in evals], [r["val_bpb"] for r in evals], label, markers=True)
    for col, key in enumerate(("step", "tokens")):
        axes[0][col].draw(xlabel=key, ylabel="train loss")
        axes[1][col].draw(xlabel=key, ylabel="val bits per byte")
    canvas.text(600 - text_width(args.title, 3) / 2, 18, args.title, scale=3)
    canvas.save(args.out)
    print(f"plot: wrote {args.out}")


if __name__ == "__main__":
    main()
