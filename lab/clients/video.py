"""A camera for the lab's clients: small JPEG frames made locally, each different from the last.

002's client sent `video: image/jpeg` blobs through `send_realtime_input` next to 16 kHz microphone
audio; the report gives neither the size nor the rate, so the lab sends what a webcam preview would
at its lowest setting: 1 fps by default (the client's `video_fps`), 160x120 (a few kB). Each frame is
a diagonal gradient that moves with the frame number plus the number itself drawn as bars, so no two
consecutive frames are byte-identical (a server that deduplicated frames would not be fooled).

Pillow encodes the JPEG (a baseline encoder is not worth writing and keeping).
"""
from __future__ import annotations

import io

from PIL import Image, ImageDraw

MIME = "image/jpeg"


class FrameSource:
    """frame(n) -> the n-th JPEG; deterministic, so a run's frames can be made again."""

    def __init__(self, width: int = 160, height: int = 120, quality: int = 70):
        if width < 16 or height < 16:
            raise ValueError(f"a frame of {width}x{height} is too small to draw on (16x16 at least)")
        self.width, self.height, self.quality = width, height, quality
        self.made = 0

    def frame(self, n: int) -> bytes:
        w, h = self.width, self.height
        img = Image.linear_gradient("L").resize((w, h)).rotate(-45 + (n * 7) % 90)
        shift = (n * 13) % 256
        rgb = Image.merge("RGB", (img, img.point(lambda v: (v + shift) % 256), img.point(lambda v: 255 - v)))
        draw = ImageDraw.Draw(rgb)
        for bit in range(16):           # the frame number in binary, one bar per bit
            x0 = 2 + bit * (w - 4) // 16
            on = (n >> bit) & 1
            draw.rectangle((x0, h - 10, x0 + (w - 4) // 16 - 2, h - 3), fill=(255, 255, 255) if on else (0, 0, 0))
        out = io.BytesIO()
        rgb.save(out, format="JPEG", quality=self.quality)
        self.made += 1
        return out.getvalue()
