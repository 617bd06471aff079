"""Training with nimble_rs: a plain PyTorch loop (SGD with momentum) through Nimble.

    python3 nimble-py/examples/training.py

- ``torch.compile(model, backend="nimble")``: AOTAutograd's forward and backward graphs, each
  planned on Nimble's streams and compiled by Inductor region by region; gradients reach
  ``.grad`` as with any compiled module. Runs on the CPU too.
- ``nimble_rs.Nimble(model).prepare(x, training=True)``: the paper's training mode, forward and
  backward as two captured CUDA graphs (CUDA, torch 2.11.0).
"""

import torch
from torch import nn

import nimble_rs


def model_and_data(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device)
    # A few steps on one batch: the loss goes down.
    batch = (torch.randn(8, 3, 16, 16, device=device), torch.randint(0, 10, (8,), device=device))
    return model, [batch] * 5


def train(run, model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(run(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main(device: str = "cuda" if torch.cuda.is_available() else "cpu") -> list:
    model, batches = model_and_data(device)
    eager = train(model, model, batches)
    model, batches = model_and_data(device)
    compiled = train(torch.compile(model, backend="nimble"), model, batches)
    print("eager losses:  ", " ".join(f"{l:.4f}" for l in eager))
    print("backend losses:", " ".join(f"{l:.4f}" for l in compiled))
    if device == "cuda":
        model, batches = model_and_data(device)
        nimble = nimble_rs.Nimble(model)
        nimble.prepare(batches[0][0], training=True)
        print("Nimble losses: ", " ".join(f"{l:.4f}" for l in train(nimble, model, batches)))
    return [eager, compiled]


if __name__ == "__main__":
    main()
