"""Why the Python training test runs cuDNN deterministically: a ResNet-50 (CIFAR-10 shapes, batch
32, SGD lr 0.002 momentum 0.9, two random batches cycled, 20 steps) trained twice eagerly from the
same weights, and once through nimble_rs (prepare(training=True)), first with cuDNN's default
(non-deterministic) algorithms and then with torch.backends.cudnn.deterministic. Prints each
run's losses and its largest relative difference from the first eager run. Needs a GPU and
nimble_rs installed.

    python3 experiments/python/training_determinism.py
"""

import copy

import nimble_rs
import torch
import torchvision

from baselines import sgd, sgd_step


def train(forward, model, batches, steps=20):
    optimizer = sgd(model.parameters(), lr=0.002)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        losses.append(sgd_step(forward, optimizer, x, y).item())
    return losses


def main():
    torch.backends.cudnn.benchmark = True
    for deterministic in (False, True):
        torch.backends.cudnn.deterministic = deterministic
        torch.manual_seed(0)
        base = torchvision.models.resnet50(num_classes=10).cuda().train()
        batches = [(torch.randn(32, 3, 32, 32, device="cuda"), torch.randint(10, (32,), device="cuda")) for _ in range(2)]
        first, second, third = copy.deepcopy(base), copy.deepcopy(base), copy.deepcopy(base)
        eager = train(first, first, batches)
        eager_again = train(second, second, batches)
        nimble = nimble_rs.Nimble(third)
        nimble.prepare(batches[0][0], training=True)
        through_nimble = train(nimble, third, batches)
        print("deterministic", deterministic)
        for tag, losses in (("eager", eager), ("eager2", eager_again), ("nimble", through_nimble)):
            worst = max(abs(a - b) / abs(b) for a, b in zip(losses, eager))
            print(f"  {tag:7}", " ".join(f"{v:.4f}" for v in losses), f"max rel vs eager {worst:.2e}", flush=True)


if __name__ == "__main__":
    main()
