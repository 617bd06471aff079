"""Probe: how far apart are two eager ResNet-50 SGD steps (10 classes, 32x32, batch 32) on one GPU, and an eager and
a torch.compile one (with and without TF32 convolutions): the relative norm of all parameters' difference after it."""
import copy, os, sys, torch, torch.nn.functional as F, torchvision.models as tv

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the shared modules, one folder up
from baselines import relative_norm  # noqa: E402

def step(model, run, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    F.cross_entropy(run(x), y).backward(); opt.step(); torch.cuda.synchronize()

def error(a, b, start):
    """a's parameters from b's, relative to b's and to how far b's step moved them from start's."""
    got, expected = list(a.parameters()), list(b.parameters())
    moved = [q - r for q, r in zip(expected, start.parameters())]
    return relative_norm(got, expected), relative_norm([p - r for p, r in zip(got, start.parameters())], moved)

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
    print(f"cudnn.allow_tf32={tf32}: eager again {error(again, ref, start)}, compile {error(comp, ref, start)} (of weights, of the step)", flush=True)
