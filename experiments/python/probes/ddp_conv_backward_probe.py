"""Probe: does torch.compile's training step of torchvision ResNet-50 (10 classes, 32x32, batch 32) fail
Inductor's stride check on convolution_backward with and without DDP and its optimizer's graph splitting, and with
Inductor's layout optimization (channels-last convolutions) off?"""
import os, sys, torch, torch._inductor.config, torch.nn.functional as F, torch.distributed as dist, torchvision.models as tv
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
for benchmark in (True, False):
    cases = [(False, True, "default", True), (True, True, "default", True), (True, False, "default", True),
             (True, True, "reduce-overhead", True), (True, True, "default", False), (True, True, "reduce-overhead", False)]
    for wrap, optimize_ddp, mode, layout in cases:
        torch.backends.cudnn.benchmark = benchmark
        torch._dynamo.reset()
        torch._dynamo.config.optimize_ddp = optimize_ddp
        torch._inductor.config.layout_optimization = layout
        torch.manual_seed(0)
        model = tv.resnet50(num_classes=10).cuda().train()
        run = torch.compile(DDP(model, device_ids=[0]) if wrap else model, mode=mode)
        try:
            for _ in range(3):
                x, y = torch.randn(32, 3, 32, 32, device="cuda"), torch.randint(10, (32,), device="cuda")
                F.cross_entropy(run(x), y).backward()
            torch.cuda.synchronize()
            result = "ok"
        except Exception as e:
            result = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:150]}"
        print(f"cudnn.benchmark={benchmark} ddp={wrap} optimize_ddp={optimize_ddp} mode={mode} layout_optimization={layout}: {result}", flush=True)
dist.destroy_process_group()
