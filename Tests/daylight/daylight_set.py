"""The daylight check's labelled set (issue 35), generated: photos of eight kinds of scene, each
drawn with randomness (gradients, noise, horizon position and tilt, clouds, sun glare, skylines,
lamps, JPEG quality) and an EXIF capture time. The thresholds in
Sources/TandemDaylight/DaylightThresholds.swift were chosen on seed 1 (the training set); reports
use other seeds (Protocol/daylight.md).

    python Tests/daylight/daylight_set.py OUT_DIR --seed 2 --per-class 100

writes OUT_DIR/<class>-<n>.jpg and OUT_DIR/labels.json ({"file": "class"}).

Scenes are drawn in linear light after exposure (1.0 = the sensor clips), then get sensor noise,
vignetting, a partial automatic white balance, the sRGB curve and JPEG compression.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys

import numpy as np
from PIL import Image

CLASSES = ["clear", "overcast", "dusk", "night", "indoor_warm", "indoor_cold", "screen", "blue_wall"]
DAYLIGHT = {"clear", "overcast"}

# Phone photos are larger; the check scales every photo to 256 pixels a side first, so these sizes
# (all above it, both orientations) keep generation quick without changing what is scored.
SIZES = [(800, 600), (640, 480), (600, 800), (960, 540), (720, 540), (480, 640), (1024, 768)]


# ---------------------------------------------------------------------------- building blocks

def smooth_field(rng, h, w, cells, octaves=3):
    """Smooth random field in about 0..1: octaves of bicubically upsampled uniform noise."""
    out = np.zeros((h, w), np.float32)
    amp, total = 1.0, 0.0
    for o in range(octaves):
        c = cells * (2 ** o)
        ch, cw = max(2, int(c * h / max(h, w)) + 1), max(2, int(c * w / max(h, w)) + 1)
        small = rng.random((ch, cw)).astype(np.float32)
        big = np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.BICUBIC), np.float32)
        out += amp * big
        total += amp
        amp *= 0.5
    return np.clip(out / total, 0, 1)


def grid(h, w):
    y = (np.arange(h, dtype=np.float32) + 0.5) / h
    x = (np.arange(w, dtype=np.float32) + 0.5) / w
    return np.meshgrid(x, y)


def mix(a, b, t):
    """Per-pixel blend of colours a and b (3-vectors or HxWx3) by t (HxW)."""
    t = t[..., None]
    return np.asarray(a, np.float32) * (1 - t) + np.asarray(b, np.float32) * t


def blob(xx, yy, cx, cy, r, aspect=1.0):
    d2 = ((xx - cx) / r) ** 2 + ((yy - cy) / (r * aspect)) ** 2
    return np.exp(-d2).astype(np.float32)


def kelvin_rgb(k):
    """Rough linear-RGB colour of a black body at k kelvin, normalised to max 1."""
    t = k / 100.0
    if t <= 66:
        r = 255.0
        g = 99.47 * np.log(t) - 161.12
        b = 0.0 if t <= 19 else 138.52 * np.log(t - 10) - 305.04
    else:
        r = 329.70 * (t - 60) ** -0.1332
        g = 288.12 * (t - 60) ** -0.0755
        b = 255.0
    c = np.clip(np.array([r, g, b], np.float32), 1, 255) / 255.0
    c = c ** 2.2  # the formula gives sRGB-ish values
    return c / c.max()


def horizon_line(rng, xx, lo=0.35, hi=0.72):
    h0 = rng.uniform(lo, hi)
    tilt = rng.uniform(-0.08, 0.08)
    return h0 + tilt * (xx - 0.5)


def ground(rng, xx, yy, h, w, level):
    """Textured ground: grass, dry earth, asphalt, a city street, sand."""
    palettes = [(0.10, 0.16, 0.05), (0.20, 0.14, 0.08), (0.12, 0.12, 0.12), (0.16, 0.15, 0.13), (0.30, 0.25, 0.16),
                (0.06, 0.10, 0.04)]
    base = np.array(palettes[rng.integers(len(palettes))], np.float32) * rng.uniform(0.6, 1.5)
    tex = smooth_field(rng, h, w, rng.uniform(6, 30), 4)
    shade = 0.55 + 0.9 * tex
    depth = 0.75 + 0.5 * rng.random() * yy  # nearer ground a little brighter or darker
    g = base[None, None, :] * (shade * depth)[..., None]
    return g * level


def skyline(rng, xx, yy, hline, h, w):
    """Mask (1 = object) of buildings and trees rising above the horizon, and their colour."""
    mask = np.zeros((h, w), np.float32)
    kind = rng.integers(4)
    if kind == 0:
        return mask
    x = 0.0
    while x < 1.0:
        width = rng.uniform(0.03, 0.18)
        height = rng.uniform(0.0, 0.16) if kind != 3 else rng.uniform(0.0, 0.08)
        if rng.random() < 0.6:
            sel = (xx >= x) & (xx < x + width) & (yy > hline - height)
            mask[sel] = 1.0
        x += width + rng.uniform(0.0, 0.15)
    if kind >= 2:  # trees: round tops
        for _ in range(rng.integers(1, 6)):
            cx = rng.uniform(0, 1)
            r = rng.uniform(0.03, 0.12)
            cy = np.interp(cx, xx[0], hline[0]) - rng.uniform(0, r)
            d = ((xx - cx) / r) ** 2 + ((yy - cy) / r) ** 2
            mask[d < 1] = 1.0
            mask[(np.abs(xx - cx) < r * 0.15) & (yy > cy)] = 1.0
    if rng.random() < 0.25:  # a branch or a roof hanging into a top corner
        cx = rng.choice([0.0, 1.0])
        r = rng.uniform(0.08, 0.2)
        d = ((xx - cx) / r) ** 2 + ((yy - 0.0) / (r * 0.7)) ** 2
        mask[d < 1] = 1.0
    return mask


def finish(rng, lin, noise, awb=(0.0, 0.0), vignette=True, exposure=1.0):
    """Camera: exposure, partial grey-world white balance, noise, vignetting, clipping, sRGB."""
    lin = lin * exposure
    strength = rng.uniform(*awb)
    if strength > 0:
        mean = lin.reshape(-1, 3).mean(0) + 1e-6
        gains = (mean.mean() / mean) ** strength
        lin = lin * gains[None, None, :]
    h, w, _ = lin.shape
    if vignette:
        xx, yy = grid(h, w)
        v = 1 - rng.uniform(0, 0.35) * (((xx - 0.5) ** 2 + (yy - 0.5) ** 2) / 0.5)
        lin = lin * v[..., None]
    sigma = noise * (0.3 + np.sqrt(np.clip(lin, 0, 1)))
    lin = lin + rng.normal(0, 1, lin.shape).astype(np.float32) * sigma
    lin = np.clip(lin, 0, 1)
    srgb = np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * np.power(lin, 1 / 2.4) - 0.055)
    return (np.clip(srgb, 0, 1) * 255 + 0.5).astype(np.uint8)


# ---------------------------------------------------------------------------- scenes

def sky_clear(rng, xx, yy, hline):
    level = rng.uniform(0.45, 1.0)
    zenith = np.array([rng.uniform(0.05, 0.16), rng.uniform(0.16, 0.32), rng.uniform(0.55, 0.95)], np.float32)
    horizon = np.array([rng.uniform(0.50, 0.75), rng.uniform(0.62, 0.85), rng.uniform(0.80, 1.0)], np.float32)
    t = np.clip(yy / np.maximum(hline, 0.05), 0, 1) ** rng.uniform(1.2, 3.0)
    sky = mix(zenith, horizon, t) * level
    return sky, level


def clouds(rng, sky, h, w, level, coverage, grey=(0.75, 1.0)):
    f = smooth_field(rng, h, w, rng.uniform(3, 10), 5)
    thr = np.quantile(f, 1 - coverage)
    c = np.clip((f - thr) / 0.08, 0, 1)
    shade = rng.uniform(*grey) * (0.8 + 0.25 * smooth_field(rng, h, w, 12, 2))
    white = np.stack([shade, shade, shade * 1.02], -1) * level * 1.1
    return sky * (1 - c[..., None]) + white * c[..., None]


def sun_glare(rng, img, xx, yy, hline):
    cx, cy = rng.uniform(0.05, 0.95), rng.uniform(0.0, 0.3)
    r = rng.uniform(0.03, 0.12)
    g = blob(xx, yy, cx, cy, r) * rng.uniform(1.0, 3.0) + blob(xx, yy, cx, cy, r * 4) * rng.uniform(0.1, 0.4)
    img = img + g[..., None] * np.array([1.0, 0.97, 0.9], np.float32)
    for k in range(rng.integers(0, 4)):  # flare ghosts along the line through the centre
        s = rng.uniform(0.3, 1.6)
        fx, fy = 0.5 + (0.5 - cx) * s, 0.5 + (0.5 - cy) * s
        img = img + (blob(xx, yy, fx, fy, rng.uniform(0.01, 0.05)) * rng.uniform(0.05, 0.2))[..., None] * \
            np.array([rng.uniform(0.5, 1), rng.uniform(0.5, 1), 1.0], np.float32)
    return img


def outdoor(rng, h, w, sky, level, hline, xx, yy, ground_level):
    g = ground(rng, xx, yy, h, w, ground_level)
    sk = skyline(rng, xx, yy, hline, h, w)
    obj = ground(rng, xx, yy, h, w, ground_level * rng.uniform(0.5, 1.3))
    below = (yy > hline).astype(np.float32)
    soft = np.clip((yy - hline) * h / 2.0, 0, 1)  # a soft horizon over two pixels
    img = sky * (1 - soft[..., None]) + g * soft[..., None]
    img = img * (1 - sk[..., None]) + obj * sk[..., None]
    del below
    return img


def scene_clear(rng, h, w):
    xx, yy = grid(h, w)
    hline = horizon_line(rng, xx)
    sky, level = sky_clear(rng, xx, yy, hline)
    if rng.random() < 0.7:
        sky = clouds(rng, sky, h, w, level, rng.uniform(0.02, 0.45))
    img = outdoor(rng, h, w, sky, level, hline, xx, yy, level * rng.uniform(0.12, 0.45))
    if rng.random() < 0.35:
        img = sun_glare(rng, img, xx, yy, hline)
    return finish(rng, img, rng.uniform(0.002, 0.012), awb=(0.0, 0.3))


def scene_overcast(rng, h, w):
    xx, yy = grid(h, w)
    hline = horizon_line(rng, xx)
    level = rng.uniform(0.6, 1.3)
    tint = kelvin_rgb(rng.uniform(6000, 8500))
    f = smooth_field(rng, h, w, rng.uniform(2, 8), 4)
    grad = 1 + rng.uniform(-0.25, 0.25) * (yy / np.maximum(hline, 0.05))
    texture = 1 + rng.uniform(0.03, 0.2) * (f - 0.5)
    sky = (grad * texture)[..., None] * tint[None, None, :] * level
    if rng.random() < 0.3:  # haze: the ground fades toward the sky's grey
        haze = rng.uniform(0.1, 0.4)
    else:
        haze = 0.0
    img = outdoor(rng, h, w, sky, level, hline, xx, yy, level * rng.uniform(0.10, 0.40))
    img = img * (1 - haze) + sky * haze
    return finish(rng, img, rng.uniform(0.003, 0.015), awb=(0.0, 0.4))


def scene_dusk(rng, h, w):
    xx, yy = grid(h, w)
    hline = horizon_line(rng, xx, 0.45, 0.8)
    level = rng.uniform(0.15, 0.55)
    zenith = np.array([rng.uniform(0.02, 0.08), rng.uniform(0.03, 0.10), rng.uniform(0.12, 0.35)], np.float32)
    if rng.random() < 0.6:  # afterglow: orange, pink or red toward the horizon
        glow = np.array([rng.uniform(0.7, 1.0), rng.uniform(0.25, 0.55), rng.uniform(0.08, 0.35)], np.float32)
    else:  # blue hour
        glow = np.array([rng.uniform(0.25, 0.45), rng.uniform(0.30, 0.45), rng.uniform(0.45, 0.75)], np.float32)
    t = np.clip(yy / np.maximum(hline, 0.05), 0, 1) ** rng.uniform(1.5, 4.0)
    sky = mix(zenith, glow, t) * level
    if rng.random() < 0.5:
        sky = clouds(rng, sky, h, w, level * 0.5, rng.uniform(0.05, 0.4), grey=(0.3, 0.8)) * \
            np.array([1.0, 0.75, 0.65], np.float32)
    img = outdoor(rng, h, w, sky, level, hline, xx, yy, level * rng.uniform(0.02, 0.12))
    for _ in range(rng.integers(0, 5)):  # early street lights and windows
        img = img + (blob(xx, yy, rng.uniform(0, 1), rng.uniform(hline.mean() - 0.1, 1), rng.uniform(0.005, 0.02))
                     * rng.uniform(1, 4))[..., None] * kelvin_rgb(rng.uniform(2000, 4000))
    return finish(rng, img, rng.uniform(0.01, 0.03), awb=(0.0, 0.5))


def scene_night(rng, h, w):
    xx, yy = grid(h, w)
    hline = horizon_line(rng, xx, 0.3, 0.75)
    glow = kelvin_rgb(rng.uniform(1900, 3500)) * rng.uniform(0.005, 0.06)  # light pollution
    sky = np.broadcast_to(glow, (h, w, 3)).astype(np.float32) * (1 + 0.5 * yy)[..., None]
    img = outdoor(rng, h, w, sky, 0.05, hline, xx, yy, rng.uniform(0.005, 0.04))
    lamp = kelvin_rgb(rng.choice([2000, 2200, 3000, 4000, 5000]))
    for _ in range(rng.integers(2, 9)):  # street lights: a head, its glow and a pool on the ground
        cx = rng.uniform(0, 1)
        cy = rng.uniform(0.05, 0.6)
        head = blob(xx, yy, cx, cy, rng.uniform(0.004, 0.015)) * rng.uniform(3, 10)
        halo = blob(xx, yy, cx, cy, rng.uniform(0.03, 0.12)) * rng.uniform(0.1, 0.5)
        pool = blob(xx, yy, cx + rng.uniform(-0.05, 0.05), rng.uniform(0.75, 1.0), rng.uniform(0.1, 0.3), 0.35) * \
            rng.uniform(0.1, 0.5)
        img = img + (head + halo + pool)[..., None] * lamp
    for _ in range(rng.integers(0, 20)):  # lit windows
        x0, y0 = rng.uniform(0, 0.95), rng.uniform(0.2, 0.8)
        sel = (xx > x0) & (xx < x0 + rng.uniform(0.01, 0.04)) & (yy > y0) & (yy < y0 + rng.uniform(0.01, 0.05))
        img[sel] += kelvin_rgb(rng.uniform(2500, 4500)) * rng.uniform(0.2, 0.8)
    exposure = rng.uniform(0.8, 3.0)  # night mode lifts it
    return finish(rng, img, rng.uniform(0.01, 0.04), awb=(0.0, 0.6), exposure=exposure)


def room(rng, h, w, kelvin, awb):
    xx, yy = grid(h, w)
    wall_colours = [(0.70, 0.66, 0.58), (0.80, 0.80, 0.78), (0.55, 0.62, 0.55), (0.60, 0.55, 0.65),
                    (0.75, 0.70, 0.55), (0.50, 0.58, 0.70), (0.85, 0.85, 0.85), (0.40, 0.35, 0.30)]
    wall = np.array(wall_colours[rng.integers(len(wall_colours))], np.float32)
    ceiling_end = rng.uniform(-0.1, 0.35)  # the ceiling's edge (negative: no ceiling in frame)
    floor_start = rng.uniform(0.6, 1.1)
    light = kelvin_rgb(kelvin)
    lx, ly = rng.uniform(0.1, 0.9), rng.uniform(-0.1, 0.5)
    falloff = 0.35 + 0.65 * blob(xx, yy, lx, ly, rng.uniform(0.3, 1.0))
    img = wall[None, None, :] * falloff[..., None]
    ceil = (yy < ceiling_end + 0.03 * (xx - 0.5)).astype(np.float32)
    ceiling = np.array([0.85, 0.85, 0.83], np.float32) * rng.uniform(0.4, 1.0)
    img = img * (1 - ceil[..., None]) + (ceiling[None, None, :] * falloff[..., None]) * ceil[..., None]
    floor = (yy > floor_start).astype(np.float32)
    floors = [(0.35, 0.22, 0.12), (0.25, 0.25, 0.25), (0.50, 0.40, 0.28), (0.15, 0.12, 0.10), (0.45, 0.45, 0.42)]
    fc = np.array(floors[rng.integers(len(floors))], np.float32)
    ftex = 0.7 + 0.6 * smooth_field(rng, h, w, 20, 3)
    img = img * (1 - floor[..., None]) + (fc[None, None, :] * (ftex * falloff)[..., None]) * floor[..., None]
    for _ in range(rng.integers(1, 7)):  # furniture, pictures, shelves, a television
        x0, y0 = rng.uniform(-0.1, 0.9), rng.uniform(0.1, 0.9)
        sel = (xx > x0) & (xx < x0 + rng.uniform(0.05, 0.5)) & (yy > y0) & (yy < y0 + rng.uniform(0.05, 0.5))
        c = rng.uniform(0.02, 0.7, 3).astype(np.float32)
        img[sel] = c * falloff[sel][:, None]
    if rng.random() < 0.3:  # a window at night: dark glass
        x0, y0 = rng.uniform(0, 0.7), rng.uniform(0.05, 0.4)
        sel = (xx > x0) & (xx < x0 + rng.uniform(0.1, 0.3)) & (yy > y0) & (yy < y0 + rng.uniform(0.15, 0.4))
        img[sel] = np.array([0.01, 0.012, 0.02], np.float32)
    img = img * light[None, None, :]
    for _ in range(rng.integers(0, 3)):  # the lamps themselves, or a ceiling panel
        if rng.random() < 0.5:
            b = blob(xx, yy, rng.uniform(0, 1), rng.uniform(0, 0.5), rng.uniform(0.01, 0.05)) * rng.uniform(2, 8)
        else:
            x0, y0 = rng.uniform(0, 0.8), rng.uniform(-0.05, max(0.0, ceiling_end))
            b = ((xx > x0) & (xx < x0 + rng.uniform(0.05, 0.3)) & (yy > y0) &
                 (yy < y0 + rng.uniform(0.02, 0.08))).astype(np.float32) * rng.uniform(1.5, 4)
        img = img + b[..., None] * light
    exposure = rng.uniform(0.35, 1.1)
    return finish(rng, img, rng.uniform(0.004, 0.02), awb=awb, exposure=exposure)


def scene_indoor_warm(rng, h, w):
    return room(rng, h, w, rng.uniform(2400, 3300), (0.1, 0.6))


def scene_indoor_cold(rng, h, w):
    return room(rng, h, w, rng.uniform(4000, 6800), (0.0, 0.5))


def scene_screen(rng, h, w):
    xx, yy = grid(h, w)
    # What the screen shows: a daylight photo.
    sw = rng.uniform(0.45, 1.0)
    sh = sw * rng.uniform(0.55, 0.8) * w / h
    sh = min(sh, rng.uniform(0.5, 1.0))
    x0, y0 = rng.uniform(0, 1 - sw) if sw < 1 else 0.0, rng.uniform(0, 1 - sh) if sh < 1 else 0.0
    ph, pw = max(8, int(sh * h)), max(8, int(sw * w))
    inner = scene_clear(rng, ph, pw) if rng.random() < 0.65 else scene_overcast(rng, ph, pw)
    shown = (inner.astype(np.float32) / 255.0) ** 2.2
    # Screen: its own white point and contrast, the subpixel grid, and moiré.
    shown = shown * kelvin_rgb(rng.uniform(6500, 9500))[None, None, :] * rng.uniform(0.6, 1.0) + rng.uniform(0.0, 0.04)
    gy, gx = np.mgrid[0:ph, 0:pw].astype(np.float32)
    period = rng.uniform(2.5, 7.0)
    phase = (gx % period) / period
    sub = np.stack([(phase < 1 / 3), (phase >= 1 / 3) & (phase < 2 / 3), (phase >= 2 / 3)], -1).astype(np.float32)
    rows = ((gy % period) / period < 0.8).astype(np.float32)[..., None]
    gridded = shown * (0.35 + 0.65 * sub * 3 * rows) / 1.3
    fx, fy = rng.uniform(2, 25) / pw, rng.uniform(2, 25) / ph
    ang = 2 * np.pi * (fx * gx + fy * gy)
    amp = rng.uniform(0.08, 0.35)
    moire = 1 + amp * np.stack([np.sin(ang), np.sin(ang + 2.1), np.sin(ang + 4.2)], -1)
    gridded = gridded * moire
    # The room around it, and the bezel.
    img = np.ones((h, w, 3), np.float32) * kelvin_rgb(rng.uniform(2700, 5000)) * rng.uniform(0.003, 0.05)
    img = img * (0.6 + 0.8 * smooth_field(rng, h, w, 4, 2))[..., None]
    bez = rng.uniform(0.005, 0.04)
    bezel_level = rng.uniform(0.005, 0.02) if rng.random() < 0.5 else rng.uniform(0.2, 0.7)  # black or bright bezel
    sel = (xx > x0 - bez) & (xx < x0 + sw + bez) & (yy > y0 - bez) & (yy < y0 + sh + bez)
    img[sel] = bezel_level
    ys, xs = int(y0 * h), int(x0 * w)
    hh, ww = min(ph, h - ys), min(pw, w - xs)
    img[ys:ys + hh, xs:xs + ww] = gridded[:hh, :ww]
    if rng.random() < 0.3:  # a reflection of a lamp on the glass
        img = img + (blob(xx, yy, rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.03, 0.1)) * rng.uniform(0.1, 0.5))[..., None]
    return finish(rng, img, rng.uniform(0.005, 0.02), awb=(0.0, 0.4), exposure=rng.uniform(0.8, 1.6))


def scene_blue_wall(rng, h, w):
    xx, yy = grid(h, w)
    hue = rng.uniform(190, 240)
    sat = rng.uniform(0.25, 0.85)
    val = rng.uniform(0.5, 0.95)
    import colorsys
    c = np.array(colorsys.hsv_to_rgb(hue / 360, sat, val), np.float32) ** 2.2
    light = kelvin_rgb(rng.uniform(3500, 7500))
    # Light across the wall: gentle, from a window or lamp to one side (at most ±15 %).
    ax, ay = rng.uniform(-1, 1), rng.uniform(-1, 1)
    shade = 1 + rng.uniform(0, 0.15) * (ax * (xx - 0.5) + ay * (yy - 0.5))
    tex = 1 + rng.uniform(0.0, 0.06) * (smooth_field(rng, h, w, rng.uniform(20, 60), 2) - 0.5)
    img = c[None, None, :] * (shade * tex)[..., None] * light[None, None, :]
    for _ in range(rng.integers(0, 3)):  # a switch, a nail, a picture
        x0, y0 = rng.uniform(0, 0.9), rng.uniform(0, 0.9)
        sel = (xx > x0) & (xx < x0 + rng.uniform(0.01, 0.12)) & (yy > y0) & (yy < y0 + rng.uniform(0.01, 0.15))
        img[sel] = rng.uniform(0.05, 0.8, 3).astype(np.float32)
    return finish(rng, img, rng.uniform(0.003, 0.015), awb=(0.0, 0.4), exposure=rng.uniform(0.6, 1.3))


SCENES = {
    "clear": scene_clear, "overcast": scene_overcast, "dusk": scene_dusk, "night": scene_night,
    "indoor_warm": scene_indoor_warm, "indoor_cold": scene_indoor_cold, "screen": scene_screen,
    "blue_wall": scene_blue_wall,
}

CAPTURE_HOURS = {
    "clear": (9, 16), "overcast": (9, 16), "dusk": (17, 20), "night": (22, 27), "indoor_warm": (19, 24),
    "indoor_cold": (8, 18), "screen": (9, 23), "blue_wall": (9, 18),
}


def exif_for(rng, label):
    exif = Image.Exif()
    lo, hi = CAPTURE_HOURS[label]
    hour = int(rng.integers(lo, hi)) % 24
    stamp = f"2026:{int(rng.integers(1, 13)):02d}:{int(rng.integers(1, 29)):02d} {hour:02d}:{int(rng.integers(0, 60)):02d}:{int(rng.integers(0, 60)):02d}"
    ifd = exif.get_ifd(0x8769)
    ifd[0x9003] = stamp
    if rng.random() < 0.8:
        off = int(rng.integers(-8, 10))
        ifd[0x9011] = f"{'+' if off >= 0 else '-'}{abs(off):02d}:00"
    return exif


def render(label, rng, size=None):
    w, h = size or SIZES[rng.integers(len(SIZES))]
    return SCENES[label](rng, h, w)


def jpeg_bytes(pixels, rng, exif):
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, "JPEG", quality=int(rng.integers(55, 96)), exif=exif)
    return buf.getvalue()


def generate(out_dir, seed, per_class, sizes=None, classes=None):
    """Writes the set; returns {file name: class}. `sizes`: (w, h) choices (default SIZES)."""
    os.makedirs(out_dir, exist_ok=True)
    labels = {}
    for ci, label in enumerate(classes or CLASSES):
        for n in range(per_class):
            rng = np.random.default_rng([seed, ci, n])
            choice = sizes or SIZES
            pixels = render(label, rng, choice[rng.integers(len(choice))])
            name = f"{label}-{n:03d}.jpg"
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(jpeg_bytes(pixels, rng, exif_for(rng, label)))
            labels[name] = label
    with open(os.path.join(out_dir, "labels.json"), "w") as f:
        json.dump(labels, f, indent=1, sort_keys=True)
    return labels


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--small", action="store_true", help="480x360 and 360x480 photos only (quick tests)")
    args = ap.parse_args(argv)
    sizes = [(480, 360), (360, 480), (512, 384)] if args.small else None
    labels = generate(args.out_dir, args.seed, args.per_class, sizes)
    print(f"{len(labels)} photos in {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
