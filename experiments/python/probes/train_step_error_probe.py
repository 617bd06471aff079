"""Probe: how far apart are two eager ResNet-50 SGD steps (10 classes, 32x32, batch 32) on one GPU, and an eager and
a torch.compile one (with and without TF32 convolutions): the relative norm of all parameters' difference after it."""
import copy, torch, torch.nn.functional as F, torchvision.models as tv

def step(model, run, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    F.cross_entropy(run(x), y).backward(); opt.step(); torch.cuda.synchronize()

def error(a, b):
    pa, pb = list(a.parameters()), list(b.parameters())
    d = sum((p - q).double().norm() ** 2 for p, q in zip(pa, pb)) ** 0.5
    moved = sum((q - r).double().norm() ** 2 for q, r in zip(pb, start.parameters())) ** 0.5
    return (d / sum(q.double().norm() ** 2 for q in pb) ** 0.5).item(), (d / moved).item()

for tf32 in (True, False):
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    start = tv.resnet50(num_classes=10).cuda().train()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 3, 32, 32, generator=g).cuda(), torch.randint(10, (32,), generator=g).cuda()
    ref, again, comp = (copy.deepcopy(start) for _ in range(3))
    step(ref, ref, x, y); step(again, again, x, y)
    torch._dynamo.reset(); step(comp, torch.compile(comp), x, y)
    print(f"cudnn.allow_tf32={tf32}: eager again {error(again, ref)}, compile {error(comp, ref)} (of weights, of the step)", flush=True)
