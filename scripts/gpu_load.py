"""A GPU load for scripts/gpu_session.sh: bf16 matrix products on GPU 0 holding ~HOLD_GB of memory, until
killed or for SECONDS. Without torch+CUDA it only sleeps (a dry run of the session script on a CPU machine).

    python3 scripts/gpu_load.py [SECONDS] [HOLD_GB]
"""

import sys
import time

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 600.0
hold_gb = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
end = time.time() + seconds
try:
    import torch

    cuda = torch.cuda.is_available()
except ImportError:
    cuda = False
if not cuda:
    print("gpu_load: no torch with CUDA: sleeping", flush=True)
    time.sleep(max(0.0, end - time.time()))
    sys.exit(0)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
keep = torch.empty(int(hold_gb * 1e9) // 2, dtype=torch.bfloat16, device="cuda")
print("gpu_load: running on %s, holding %.1f GB" % (torch.cuda.get_device_name(0), hold_gb), flush=True)
while time.time() < end:
    (a @ b).sum().item()
