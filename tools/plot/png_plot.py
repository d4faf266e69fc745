"""Line charts written as PNG with nothing but Python's standard library (zlib, struct), so
that plotting needs no extra packages: a canvas with lines, markers and a 5x7 bitmap
font, axes with ticks, grid and legend, and a PNG encoder.

  canvas = Canvas(1200, 800)
  ax = Axes(canvas, x=60, y=40, w=500, h=300)
  ax.plot([0, 1, 2], [3.0, 2.5, 2.4], label="loss")
  ax.draw(xlabel="step", ylabel="train loss")
  canvas.save("out.png")
"""
import math
import os
import struct
import zlib

# The classic public-domain 5x7 font, ASCII 32..126: five column bytes per glyph, bit 0 the top row.
_FONT = bytes.fromhex(
    "0000000000" "00005f0000" "0007000700" "147f147f14" "242a7f2a12" "2313086462" "3649552250" "0005030000"
    "001c224100" "0041221c00" "082a1c2a08" "08083e0808" "0050300000" "0808080808" "0060600000" "2010080402"
    "3e5149453e" "00427f4000" "4261514946" "2141454b31" "1814127f10" "2745454539" "3c4a494930" "0171090503"
    "3649494936" "064949291e" "0036360000" "0056360000" "0814224100" "1414141414" "0041221408" "0201510906"
    "324979413e" "7e1111117e" "7f49494936" "3e41414122" "7f4141221c" "7f49494941" "7f09090101" "3e41415132"
    "7f0808087f" "00417f4100" "2040413f01" "7f08142241" "7f40404040" "7f0204027f" "7f0408107f" "3e4141413e"
    "7f09090906" "3e4151215e" "7f09192946" "4649494931" "01017f0101" "3f4040403f" "1f2040201f" "7f2018207f"
    "6314081463" "0304780403" "6151494543" "007f414100" "0204081020" "0041417f00" "0402010204" "4040404040"
    "0001020400" "2054545478" "7f48444438" "3844444420" "384444487f" "3854545418" "087e090102" "081454543c"
    "7f08040478" "00447d4000" "2040443d00" "007f102844" "00417f4000" "7c04180478" "7c08040478" "3844444438"
    "7c14141408" "081414187c" "7c08040408" "4854545420" "043f444020" "3c4040207c" "1c2040201c" "3c4030403c"
    "4428102844" "0c5050503c" "4464544c44" "0008364100" "00007f0000" "0041360800" "0201020402")
GLYPH_W, GLYPH_H = 6, 8  # advance and line height at scale 1 (5x7 plus spacing)

# matplotlib's default colour cycle, so plots look as they did.
COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
          (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]
BLACK, GRID, WHITE = (0, 0, 0), (222, 222, 222), (255, 255, 255)


class Canvas:
    def __init__(self, width, height):
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x, y, color):
        x, y = int(round(x)), int(round(y))
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(color)

    def rect(self, x0, y0, x1, y1, color):
        for y in range(max(0, int(y0)), min(self.h, int(y1) + 1)):
            for x in range(max(0, int(x0)), min(self.w, int(x1) + 1)):
                i = (y * self.w + x) * 3
                self.px[i:i + 3] = bytes(color)

    def line(self, x0, y0, x1, y1, color, width=1, dash=0):
        steps = max(1, int(max(abs(x1 - x0), abs(y1 - y0))))
        half = (width - 1) / 2
        for s in range(steps + 1):
            if dash and (s // dash) % 2:
                continue
            x, y = x0 + (x1 - x0) * s / steps, y0 + (y1 - y0) * s / steps
            if width == 1:
                self.dot(x, y, color)
            else:
                self.rect(x - half, y - half, x + half, y + half, color)

    def text(self, x, y, s, color=BLACK, scale=2, vertical=False):
        """Draws s with its top left at (x, y); vertical text reads bottom to top from (x, y)."""
        for n, ch in enumerate(s):
            code = ord(ch) if 32 <= ord(ch) <= 126 else ord("?")
            cols = _FONT[(code - 32) * 5:(code - 32) * 5 + 5]
            for cx, bits in enumerate(cols):
                for cy in range(7):
                    if bits >> cy & 1:
                        gx, gy = n * GLYPH_W + cx, cy
                        if vertical:
                            px, py = x + gy * scale, y - gx * scale
                        else:
                            px, py = x + gx * scale, y + gy * scale
                        self.rect(px, py, px + scale - 1, py + scale - 1, color)

    def save(self, path):
        """Writes an 8-bit RGB PNG, atomically (a temporary name, then rename)."""
        rows = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
               chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(png)
        os.replace(tmp, path)


def text_width(s, scale=2):
    return len(s) * GLYPH_W * scale


def nice_ticks(lo, hi, target=5):
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)], step


def tick_label(v, step):
    if abs(v) >= 1e6 and step >= 1e5:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e3 and step >= 100:
        return f"{v / 1e3:g}k"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{decimals}f}"


class Axes:
    """One panel: curves in data coordinates, drawn into the box (x, y, w, h) of the canvas."""

    def __init__(self, canvas, x, y, w, h):
        self.c, self.box = canvas, (x, y, w, h)
        self.series = []

    def plot(self, xs, ys, label, color=None, markers=False):
        if xs:
            self.series.append((list(xs), list(ys), label, color or COLORS[len(self.series) % len(COLORS)], markers))

    def draw(self, xlabel, ylabel):
        c, (bx, by, bw, bh) = self.c, self.box
        xs = [v for s in self.series for v in s[0]] or [0, 1]
        ys = [v for s in self.series for v in s[1]] or [0, 1]
        xlo, xhi = min(xs), max(xs)
        ylo, yhi = min(ys), max(ys)
        pad = (yhi - ylo) * 0.05 or 0.5
        ylo, yhi = ylo - pad, yhi + pad
        if xhi == xlo:
            xlo, xhi = xlo - 1, xhi + 1
        sx = lambda v: bx + (v - xlo) / (xhi - xlo) * bw  # noqa: E731
        sy = lambda v: by + bh - (v - ylo) / (yhi - ylo) * bh  # noqa: E731
        xt, xstep = nice_ticks(xlo, xhi)
        yt, ystep = nice_ticks(ylo, yhi)
        for v in xt:
            c.line(sx(v), by, sx(v), by + bh, GRID, dash=4)
            label = tick_label(v, xstep)
            c.text(sx(v) - text_width(label) / 2, by + bh + 6, label)
        for v in yt:
            c.line(bx, sy(v), bx + bw, sy(v), GRID, dash=4)
            label = tick_label(v, ystep)
            c.text(bx - text_width(label) - 6, sy(v) - 7, label)
        for xs_, ys_, _, color, markers in self.series:
            pts = [(sx(a), sy(b)) for a, b in zip(xs_, ys_)]
            for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
                c.line(x0, y0, x1, y1, color, width=2)
            for x0, y0 in pts if markers else []:
                c.rect(x0 - 3, y0 - 3, x0 + 3, y0 + 3, color)
        # the frame, axis labels and legend go over the curves
        for x0, y0, x1, y1 in ((bx, by, bx + bw, by), (bx, by + bh, bx + bw, by + bh), (bx, by, bx, by + bh),
                               (bx + bw, by, bx + bw, by + bh)):
            c.line(x0, y0, x1, y1, BLACK)
        c.text(bx + bw / 2 - text_width(xlabel) / 2, by + bh + 28, xlabel)
        ylabel_x = bx - 6 - max(text_width(tick_label(v, ystep)) for v in yt) - 22
        c.text(ylabel_x, by + bh / 2 + text_width(ylabel) / 2, ylabel, vertical=True)
        labels = [s for s in self.series if s[2]]
        if labels:
            lw = max(text_width(s[2]) for s in labels) + 44
            lx, ly = bx + bw - lw - 8, by + 8
            c.rect(lx, ly, lx + lw, ly + 8 + 20 * len(labels), WHITE)
            for n, (_, _, label, color, _) in enumerate(labels):
                yy = ly + 14 + 20 * n
                c.line(lx + 6, yy, lx + 30, yy, color, width=3)
                c.text(lx + 38, yy - 7, label)
