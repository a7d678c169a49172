"""A WASI 0.2 command component in Python on `tensorwasm:gpu`, made by
componentize-py (guest/examples/build-lang-components.sh): the MLP of the
Rust guest (guest/examples/gpu-component), in the same two modes.

- `mlp [SEED]` (the default): `softmax(relu(x W1 + b1) W2 + b2)` on device
  buffers with the built-in ops (GEMM, bias add, ReLU, softmax), checked
  against the same computation in plain Python; inputs from SEED (printed)
  by the Rust guest's generator, so one seed is one model in every language.
- `mlp-file PATH`: the same pass on the model in PATH, a file in a
  preopened directory in the Rust guest's format (its `write-model`).

Prints `mlp ok: ...` and the largest error, or what differs (exit code 1).
"""

import math
import struct
import sys

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import buffers, tensor_ops
from wit_world.imports.tensor_ops import Dtype, Tensor

MASK64 = (1 << 64) - 1


def f32(x):
    """`x` rounded to the nearest f32. Rounding a double sum, product or
    difference of two f32s gives the f32 operation's result."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_text(x):
    """`x`, an f32, as Rust's `{:e}` writes it: the fewest digits that read
    back as the same f32."""
    for digits in range(9):
        text = f"{x:.{digits}e}"
        if f32(float(text)) == x:
            break
    mantissa, exponent = text.split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def describe(e):
    """A failed call's `types.error` as one line, as the Rust guest has it."""
    return f"ErrorCode::{e.code.name.capitalize()}: {e.message}"


class Model:
    """The MLP's sizes and values: x [batch, inputs], w1 [inputs, hidden],
    b1 [hidden], w2 [hidden, outputs], b2 [outputs], every value an f32."""

    def __init__(self, batch, inputs, hidden, outputs, parts):
        self.batch, self.inputs, self.hidden, self.outputs = batch, inputs, hidden, outputs
        self.x, self.w1, self.b1, self.w2, self.b2 = parts

    @staticmethod
    def lens(batch, inputs, hidden, outputs):
        """How many values x, w1, b1, w2 and b2 hold."""
        return [batch * inputs, inputs * hidden, hidden, hidden * outputs, outputs]

    @classmethod
    def random(cls, seed):
        """Values in ±[0.05, 1), never zero, at odd sizes: the Rust guest's
        xorshift64 and f32 arithmetic, step for step."""
        state = (seed | 1) & MASK64
        (point_05, point_95) = (f32(0.05), f32(0.95))

        def value():
            nonlocal state
            state ^= (state << 13) & MASK64
            state ^= state >> 7
            state ^= (state << 17) & MASK64
            unit = (state >> 40) / (1 << 24)
            magnitude = f32(point_05 + f32(point_95 * unit))
            return magnitude if state & 1 == 0 else -magnitude

        sizes = (5, 37, 67, 10)
        parts = [[value() for _ in range(n)] for n in Model.lens(*sizes)]
        return cls(*sizes, parts)

    @classmethod
    def decode(cls, file):
        """A model from its file form: the four sizes as u32, then x, w1,
        b1, w2, b2 as f32, all little-endian."""
        if len(file) < 16:
            raise ValueError("the file is too short")
        sizes = struct.unpack("<4I", file[:16])
        count = (len(file) - 16) // 4
        lens = Model.lens(*sizes)
        if count != sum(lens):
            (b, i, h, o) = sizes
            raise ValueError(
                f"the file holds {count} values; sizes {b} x {i} -> {h} -> {o} need {sum(lens)}"
            )
        values = struct.unpack(f"<{count}f", file[16 : 16 + 4 * count])
        parts, start = [], 0
        for n in lens:
            parts.append(list(values[start : start + n]))
            start += n
        return cls(*sizes, parts)

    def forward_cpu(self):
        """The forward pass in Python's floats (f64), summed in the order
        the Rust guest sums."""
        (b, i, h, o) = (self.batch, self.inputs, self.hidden, self.outputs)
        hidden = [0.0] * (b * h)
        for r in range(b):
            for c in range(h):
                dot = 0.0
                for k in range(i):
                    dot += self.x[r * i + k] * self.w1[k * h + c]
                hidden[r * h + c] = max(dot + self.b1[c], 0.0)
        y = []
        for r in range(b):
            logits = []
            for c in range(o):
                dot = 0.0
                for k in range(h):
                    dot += hidden[r * h + k] * self.w2[k * o + c]
                logits.append(dot + self.b2[c])
            top = max(logits)
            exps = [math.exp(l - top) for l in logits]
            total = 0.0
            for e in exps:
                total += e
            y.extend(f32(e / total) for e in exps)
        return y

    def forward_gpu(self):
        """The forward pass on the device: every op queued, only the last
        one waited for (the stream runs them in order)."""
        (b, i, h, o) = (self.batch, self.inputs, self.hidden, self.outputs)
        held = []

        def upload(values):
            buffer = output(len(values))
            buffer.write(0, struct.pack(f"<{len(values)}f", *values))
            return buffer

        def output(n):
            buffer = buffers.Buffer.alloc(4 * n)
            held.append(buffer)
            return buffer

        def tensor(buffer, shape):
            return Tensor(buffer=buffer, offset=0, dtype=Dtype.F32, shape=shape, strides=[])

        try:
            x, w1, b1 = upload(self.x), upload(self.w1), upload(self.b1)
            w2, b2 = upload(self.w2), upload(self.b2)
            pre, act = output(b * h), output(b * h)
            logits, biased, y = output(b * o), output(b * o), output(b * o)
            # Launches dropped unwaited keep running: the host holds what
            # they use until they have finished.
            queued(tensor_ops.gemm(tensor(x, [b, i]), tensor(w1, [i, h]), tensor(pre, [b, h]), 1.0, 0.0, False))
            queued(tensor_ops.add(tensor(pre, [b, h]), tensor(b1, [h]), tensor(act, [b, h])))
            queued(tensor_ops.relu(tensor(act, [b, h]), tensor(pre, [b, h])))
            queued(tensor_ops.gemm(tensor(pre, [b, h]), tensor(w2, [h, o]), tensor(logits, [b, o]), 1.0, 0.0, False))
            queued(tensor_ops.add(tensor(logits, [b, o]), tensor(b2, [o]), tensor(biased, [b, o])))
            with tensor_ops.softmax(tensor(biased, [b, o]), tensor(y, [b, o])) as last:
                last.wait()
            return list(struct.unpack(f"<{b * o}f", y.read(0, 4 * b * o)))
        finally:
            for buffer in held:
                buffer.__exit__(None, None, None)


def queued(launch):
    """Drops `launch` without waiting for it: it runs on."""
    launch.__exit__(None, None, None)


def mlp(model):
    """Runs `model` on the device and in Python and compares; the
    summary line, or what differs."""
    try:
        gpu = model.forward_gpu()
    except Err as e:
        raise Failure(f"mlp: {describe(e.value)}")
    cpu = model.forward_cpu()
    worst = 0.0
    for n, (g, c) in enumerate(zip(gpu, cpu)):
        error = abs(f32(g - c))
        if error != error or error > 1e-5 + 1e-4 * abs(c):
            raise Failure(f"mlp: output {n} is {g}, the CPU says {c} (error {error})")
        worst = max(worst, error)
    if len(gpu) != len(cpu):
        raise Failure(f"mlp: {len(gpu)} outputs, {len(cpu)} expected")
    print(
        f"mlp ok: batch {model.batch}, {model.inputs} -> {model.hidden} -> {model.outputs}, "
        f"largest error {f32_text(worst)}"
    )


class Failure(Exception):
    """What the guest prints on stderr before it exits with code 1."""


def main(args):
    mode = args[1] if len(args) > 1 else "mlp"
    if mode == "mlp":
        seed = int(args[2]) if len(args) > 2 else 0x5EED
        print(f"seed {seed}")
        mlp(Model.random(seed))
    elif mode == "mlp-file":
        if len(args) < 3:
            raise Failure("mlp-file PATH")
        path = args[2]
        try:
            with open(path, "rb") as f:
                file = f.read()
        except OSError as e:
            raise Failure(f"cannot read {path}: {e.strerror}")
        try:
            model = Model.decode(file)
        except ValueError as e:
            raise Failure(f"{path}: {e}")
        mlp(model)
    else:
        raise Failure(f"unknown mode {mode}")


class Run(exports.Run):
    """The command's `wasi:cli/run`."""

    def run(self) -> None:
        try:
            main(sys.argv)
        except Failure as e:
            print(e, file=sys.stderr)
            sys.stdout.flush()
            raise Err(None)
        finally:
            sys.stdout.flush()
