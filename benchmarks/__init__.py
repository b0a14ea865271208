"""Measurement code behind ``scripts/bench.py``: FLOP counting, the timm + transformers reference,
alternating step timing, the levers, fill-mask inference and the CUDA figures.

    flops      analytic matmul FLOPs per step (formula in its docstring)
    reference  ReferenceModel: timm VisionTransformer + transformers BertForMaskedLM
    step       batches, contenders, alternating rounds, the train and lever benchmarks
    inference  FillMask queries/s and latency, with and without the photo
    data       cached loader vs decoding every JPEG, memmap vs Arrow storage
    cuda       bf16-mixed, MFU against a table of device peaks, torch.compile on/off
    epoch      a whole epoch, data loading included: the obvious pipeline, ours, ours frozen
"""
