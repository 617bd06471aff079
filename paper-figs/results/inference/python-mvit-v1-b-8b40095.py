# nimble_rs.Nimble(torchvision mvit_v1_b) from Python, float32 (TF32 convolutions, cuDNN benchmark), batch 1, 16 frames.
import time, torch, torchvision, nimble_rs
torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
model = torchvision.models.get_model("mvit_v1_b", weights=None).cuda().eval()
x = torch.randn(1, 3, 16, 224, 224, device="cuda")
nimble = nimble_rs.Nimble(model)
started = time.time(); report = nimble.prepare(x); prepare_s = time.time() - started
errors = []
for _ in range(3):
    y = torch.randn_like(x)
    with torch.no_grad():
        expected = model(y)
    errors.append(((nimble(y) - expected).abs().max() / expected.abs().max()).item())
print(f"mvit_v1_b: nimble_rs.Nimble prepared in {prepare_s:.2f} s, {report['streams']} streams; relative max-abs error from eager on 3 fresh inputs: max {max(errors):.2e}")
