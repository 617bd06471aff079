import ast, json, sys, torch, torchvision
import nimble_rs
from nimble_rs.dynamo import hoist, kernels_plan, pipeline
from nimble_rs.dynamo.wrapper import WrapperProgram
torch.backends.cudnn.benchmark = True
found = []
orig = hoist.find
def spy(program, mutated=()):
    h = orig(program, mutated)
    found.append((program, h))
    return h
hoist.find = spy
model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False).cuda().eval()
x = torch.randn(16, 3, 299, 299, device="cuda")
f = torch.compile(model, backend="nimble", options={"hoist_weight_kernels": True, "choose": "streams"})
with torch.no_grad():
    f(x)
r = pipeline.reports()[-1]
print({k: r.get(k) for k in ("hoisted_kernels", "not_hoisted", "streams", "syncs", "hoisted_bytes")})
program, h = found[-1]
shown = 0
for i, reason in sorted(h.refused.items()):
    print("REFUSED", i, program.statements[i].name, reason)
    if shown < 4:
        shown += 1
        for j in range(max(0, i - 6), min(len(program.statements), i + 4)):
            s = program.statements[j]
            print("   ", j, s.kind, ast.unparse(s.node)[:160], sorted(s.reads), sorted(s.writes))
src = open(kernels_plan.inductor_module.__globals__['sys'].modules[program.module.__name__].__file__).read()
k = src.index("def call")
print(src[k:k+6000])
