"""Train the bundled workload DiT on the MNIST-5k digits (PyTorch on CPU; ``train`` extra).

Recipe (DiT's, scaled down): epsilon-prediction MSE, uniform t over DDPM's 1000 steps, AdamW
(``--lr``, 100-step warm-up, cosine decay over the last third to lr/20), ``--batch``, grad clip 1,
EMA ``--ema`` (the EMA weights are what ships), 10 % label dropout for classifier-free guidance,
bf16 autocast for speed (all inference is FP32). Checkpoints every ``--ckpt-every`` steps make
the run resumable (``--resume``), and every checkpoint also exports the EMA weights as ``.npz``.
``--init NPZ`` starts from exported weights (model and EMA) instead of DiT's initialization.
``--eval-every N`` samples the EMA model every N steps (class-conditional DDIM, 50 steps, the
analysis's CFG and seeds) and logs its quality check: for ``digits`` the kNN class accuracy of
100 samples (the legibility check), for ``photos`` the patch statistics of 200 samples against
held-out crops (``dstar.golden.image_stats``).

The bundled digit DiT: 10k steps from DiT's initialization (``--steps 10000``, the defaults),
then ``--init golden/data/dit_mnist.npz --steps 5000 --batch 32 --lr 2e-4 --ema 0.9995``
(resumed from its checkpoints twice). The bundled photo DiT: ``--workload photos --steps 7000
--batch 32 --lr 3e-4 --ema 0.9995`` from DiT's initialization (resumed from its checkpoints).

``--workload``: ``digits`` (the MNIST-5k digits, 10 classes) or ``photos`` (random 32x32 crops,
flipped, of the photos in ``dstar.golden.photos``, conditioned on the source photo).
"""

import argparse
import copy
import math
import time
from pathlib import Path

import numpy as np
import torch

from dstar.config import Workload
from dstar.golden.diffusion import alphas_cumprod
from dstar.golden.dit import DiTShape
from dstar.golden.mnist import load_mnist
from dstar.golden.photos import PHOTOS, random_crops
from dstar.golden.sampler import CFG_SCALE
from dstar.golden.workloads import WORKLOADS

from .torch_dit import DiT, from_numpy_weights, to_numpy_weights


class _NumpyFacade:
    """The EMA model behind ``golden.dit.DiT``'s ``forward`` signature, for the NumPy sampler."""

    def __init__(self, model: DiT):
        self.model, self.shape = model, model.shape

    @torch.no_grad()
    def forward(self, x, t, y, **_hooks):
        out = self.model(torch.from_numpy(np.asarray(x, dtype=np.float32)),
                         torch.from_numpy(np.asarray(t, dtype=np.int64)),
                         torch.from_numpy(np.asarray(y, dtype=np.int64)))
        return out.numpy()


def _samples(ema: DiT, samples: int, steps: int, cfg_scale: float, seed: int):
    from dstar.golden.sampler import ddim_sample, initial_noise

    ema.eval()
    labels = np.arange(samples, dtype=np.int64) % ema.shape.num_classes
    x = ddim_sample(_NumpyFacade(ema), labels, initial_noise(samples, ema.shape, seed), steps,
                    cfg_scale)
    return x, labels


def legibility(ema: DiT, samples: int = 100, steps: int = 50, cfg_scale: float = CFG_SCALE,
               seed: int = 0) -> float:
    """kNN class accuracy of ``samples`` class-conditional DDIM samples of ``ema``."""
    from dstar.golden.classifier import DigitClassifier

    return DigitClassifier().accuracy(*_samples(ema, samples, steps, cfg_scale, seed))


def photo_quality(ema: DiT, samples: int = 200, steps: int = 50,
                  cfg_scale: float = CFG_SCALE,
                  seed: int = 0) -> dict:
    """Patch statistics of ``samples`` DDIM samples of ``ema`` against held-out crops."""
    from dstar.golden.image_stats import image_distances
    from dstar.golden.photos import held_out_crops

    return image_distances(_samples(ema, samples, steps, cfg_scale, seed)[0], held_out_crops()[0])


def _digits_batches():
    images, labels = load_mnist()
    return lambda rng, n: (lambda i: (images[i], labels[i]))(rng.integers(0, len(images), n))


#: Per workload: (DiT shape, batch sampler maker () -> ((np rng, n) -> (x, y)), quality check).
#: The default output is the workload's bundled weights file in the checkout
#: (``golden/data/``, ``dstar.golden.workloads``).
TRAINING = {
    Workload.DIGITS: (DiTShape(), _digits_batches, legibility),
    Workload.PHOTOS: (DiTShape(num_classes=len(PHOTOS)), lambda: random_crops, photo_quality),
}


def lr_at(step: int, total: int, base: float, warmup: int = 100) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    decay_start = total * 2 // 3
    if step < decay_start:
        return base
    frac = (step - decay_start) / max(1, total - decay_start)
    lo = base / 20
    return lo + 0.5 * (base - lo) * (1 + math.cos(math.pi * min(1.0, frac)))


def export(ema: DiT, path: Path, step: int, shape: DiTShape) -> None:
    w = to_numpy_weights(ema)
    meta = {f"meta.{k}": np.array(v) for k, v in vars(shape).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **w, **meta, **{"meta.train_steps": np.array(step)})
    tmp.replace(path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="dstar train", description=__doc__)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=Path(".train"))
    ap.add_argument("--workload", choices=[w.value for w in Workload],
                    default=Workload.DIGITS.value)
    ap.add_argument("--out", type=Path, default=None, help="weights file (default: the bundled "
                    "one of the workload)")
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", type=Path, default=None, help="start from these exported weights")
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--eval-every", type=int, default=0)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    shape, batches, check = TRAINING[Workload(args.workload)]
    args.out = args.out or Path("golden/data") / WORKLOADS[Workload(args.workload)].weights
    draw = batches()
    ab = torch.from_numpy(alphas_cumprod()).float()

    model = DiT(shape)
    if args.init is not None:
        with np.load(args.init) as f:
            from_numpy_weights(model, {k: f[k] for k in f.files if not k.startswith("meta.")})
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    step = 0
    ckpt = args.workdir / "ckpt.pt"
    if args.resume and ckpt.exists():
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        ema.load_state_dict(st["ema"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        torch.set_rng_state(st["rng"])
        print(f"resumed at step {step}", flush=True)
    args.workdir.mkdir(parents=True, exist_ok=True)

    gen = torch.Generator().manual_seed(args.seed + step)
    np_rng = np.random.default_rng(args.seed + step)
    t0, run_loss = time.time(), None
    model.train()
    while step < args.steps:
        x0, y = (torch.from_numpy(a) for a in draw(np_rng, args.batch))
        t = torch.randint(0, ab.shape[0], (args.batch,), generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        a = ab[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = model(xt, t, y, train=True)
        loss = torch.nn.functional.mse_loss(pred.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters(), strict=True):
                pe.mul_(args.ema).add_(pm.detach(), alpha=1 - args.ema)
        step += 1
        run_loss = loss.item() if run_loss is None else 0.99 * run_loss + 0.01 * loss.item()
        if step % 50 == 0:
            print(f"step {step} loss {run_loss:.4f} lr {lr_at(step, args.steps, args.lr):.2e} "
                  f"{(time.time() - t0) / 50:.3f} s/step", flush=True)
            t0 = time.time()
        if step % args.ckpt_every == 0 or step == args.steps:
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(),
                        "opt": opt.state_dict(), "step": step, "rng": torch.get_rng_state()},
                       args.workdir / "ckpt.tmp")
            (args.workdir / "ckpt.tmp").replace(ckpt)
            export(ema, args.out, step, shape)
        if args.eval_every and step % args.eval_every == 0:
            print(f"step {step} {check.__name__} {check(ema)}", flush=True)


if __name__ == "__main__":
    main()
