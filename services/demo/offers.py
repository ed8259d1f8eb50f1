"""SIMULATED GPU offers for ``--demo`` when no provider key is set: enough variety (GPU types, counts,
spot, regions, one that the default model does not fit) to show ranking by $ per completed run.
Prices are made up and say nothing about any provider's real prices."""

from __future__ import annotations

from services.offers.models import FetchResult, Offer

NOTE = "SIMULATED offers with made-up prices: no provider API key is set (the Keys line says which to set)"

_ROWS = (  # provider, gpu_type, name, count, GB/GPU, $/hr for the box, spot, region
    ("primeintellect", "H100", "H100_80GB", 8, 80, 17.60, False, "demo-us-east"),
    ("primeintellect", "H100", "H100_80GB", 8, 80, 9.90, True, "demo-us-east"),
    ("primeintellect", "H100", "H100_80GB", 1, 80, 2.30, False, "demo-eu-north"),
    ("primeintellect", "A100", "A100_80GB", 4, 80, 5.20, False, "demo-us-west"),
    ("primeintellect", "RTX4090", "RTX4090_24GB", 1, 24, 0.42, False, "demo-eu-central"),
    ("vast", "H100", "H100 SXM", 8, 79.6, 15.10, False, "demo-Texas, US"),
    ("vast", "H100-PCIE", "H100 PCIE", 2, 79.6, 3.70, False, "demo-Quebec, CA"),
    ("vast", "RTX4090", "RTX 4090", 8, 24, 2.90, False, "demo-Taiwan, TW"),
    ("vast", "L40S", "L40S", 4, 45, 3.10, True, "demo-Bavaria, DE"),
    ("vast", "A6000", "RTX A6000", 2, 48, 0.95, False, "demo-Ohio, US"),
    ("lambda", "H100", "H100 (80 GB SXM5)", 8, 80, 23.92, False, "demo-us-south-1"),
    ("lambda", "GH200", "GH200 (96 GB)", 1, 96, 1.49, False, "demo-us-east-1"),
    ("lambda", "A100", "A100 (80 GB SXM4)", 8, 80, 14.32, False, "demo-us-midwest-1"),
    ("lambda", "A10", "A10 (24 GB PCIe)", 1, 24, 0.75, False, "demo-us-west-1"),
    ("runpod", "H100", "H100 SXM", 8, 80, 21.52, False, "demo-secure"),
    ("runpod", "L40S", "L40S", 2, 48, 0.90, True, "demo-community"),
    ("runpod", "RTX4090", "RTX 4090", 2, 24, 0.68, False, "demo-community"),
    ("primeintellect", "H100", "H100_80GB", 2, 80, 3.00, True, "demo-eu-north"),  # spot: cheapest when it
    ("primeintellect", "H100", "H100_80GB", 2, 80, 4.70, False, "demo-eu-north"),  # is not preempted
    ("vast", "H100", "H100 SXM", 2, 79.6, 2.60, True, "demo-Texas, US"),
)


def demo_offers(spot: bool | None = None) -> FetchResult:
    """The simulated offers: both kinds (``spot`` None), or only spot / only on-demand."""
    offers = tuple(
        Offer(
            provider=p,
            id=f"demo-{i}",
            gpu_type=t,
            gpu_name=n,
            gpu_count=c,
            vram_gb=float(gb),
            price_hr=price,
            spot=s,
            region=region,
            availability="SIMULATED",
            params={"simulated": True},
        )
        for i, (p, t, n, c, gb, price, s, region) in enumerate(_ROWS)
        if spot is None or s == spot
    )
    return FetchResult(offers)
