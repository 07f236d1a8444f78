"""The model zoo of the performance issue, as ``train_step.py`` models: default settings.

Each builder returns ``(model, batches, loss(model, x, y), optimizer factory)`` like
``train_step.build``. Models come from their configs or from torch.nn with the
settings their libraries ship (dropout on, HF's defaults), at sizes two cores train
in tens of milliseconds per step. Nothing is tuned around lazy-mlir: the shapes are
the ones a user of each family would pick for a small run.

* ``resnet18``: ResNet-18's layout (stem, four stages of two basic blocks with
  BatchNorm, global pool) at widths 16-128 on 32x32 images, batch 16, SGD with
  momentum and weight decay.
* ``vit``: HF ViT (hidden 128, 4 layers, 4 heads) on 32x32 images in 4x4 patches,
  batch 16, AdamW.
* ``distilbert``: HF DistilBERT sequence classification (dim 128, 2 layers), batch 8 x
  64 tokens, AdamW.
* ``gpt2``: HF GPT-2 LM head (n_embd 128, 2 layers), batch 8 x 64 tokens, labels =
  inputs, AdamW.
* ``t5``: HF T5 (d_model 128, 2+2 layers), batch 8, 48 source and 16 target tokens,
  AdamW.
* ``lstm``: PyTorch's word-language-model example (embedding 64, 2-layer LSTM of 128,
  dropout 0.2, 35 steps, batch 16), gradient clipping at 0.25, SGD lr 20.
"""

from __future__ import annotations

from typing import Any

MODELS = ("resnet18", "vit", "distilbert", "gpt2", "t5", "lstm")
VOCAB = 1000


def build(name: str, quick: bool) -> tuple[Any, list[tuple[Any, Any]], Any, Any]:
    """(model, batches, loss(model, x, y), optimizer factory) for zoo model ``name``."""
    import torch

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    batch = 2 if quick else None
    return _BUILDERS[name](torch, g, batch)


def _hf():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _adamw(params: Any) -> Any:
    import torch

    return torch.optim.AdamW(params, lr=1e-3)


def _token_loss(m: Any, x: Any, y: Any) -> Any:
    """An HF model's own loss on token ids ``x`` and labels ``y``."""
    return m(input_ids=x, labels=y).loss


def _tokens(torch: Any, g: Any, batch: int, seq: int) -> Any:
    return torch.randint(0, VOCAB, (batch, seq), generator=g)


def _resnet18(torch: Any, g: Any, batch: int | None) -> tuple:
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    widths = (16, 32, 64, 128)
    layers: list[nn.Module] = [nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()]
    cin = widths[0]
    for i, w in enumerate(widths):
        layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    model = nn.Sequential(*layers)
    n = batch or 16
    batches = [(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)) for _ in range(4)]

    def loss_fn(m: Any, x: Any, y: Any) -> Any:
        return nn.functional.cross_entropy(m(x), y)

    def opt(params: Any) -> Any:
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)

    return model, batches, loss_fn, opt


def _vit(torch: Any, g: Any, batch: int | None) -> tuple:
    t = _hf()
    model = t.ViTForImageClassification(t.ViTConfig(
        image_size=32, patch_size=4, num_channels=3, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=512, num_labels=10))
    n = batch or 16
    batches = [(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)) for _ in range(4)]

    def loss_fn(m: Any, x: Any, y: Any) -> Any:
        return m(pixel_values=x, labels=y).loss

    return model, batches, loss_fn, _adamw


def _distilbert(torch: Any, g: Any, batch: int | None) -> tuple:
    t = _hf()
    model = t.DistilBertForSequenceClassification(t.DistilBertConfig(
        vocab_size=VOCAB, dim=128, n_layers=2, n_heads=2, hidden_dim=512, max_position_embeddings=128, num_labels=2))
    n = batch or 8
    batches = [(_tokens(torch, g, n, 64), torch.randint(0, 2, (n,), generator=g)) for _ in range(4)]

    return model, batches, _token_loss, _adamw


def _gpt2(torch: Any, g: Any, batch: int | None) -> tuple:
    t = _hf()
    model = t.GPT2LMHeadModel(t.GPT2Config(vocab_size=VOCAB, n_embd=128, n_layer=2, n_head=2, n_positions=128))
    n = batch or 8
    batches = [(ids, ids) for ids in (_tokens(torch, g, n, 64) for _ in range(4))]

    return model, batches, _token_loss, _adamw


def _t5(torch: Any, g: Any, batch: int | None) -> tuple:
    t = _hf()
    model = t.T5ForConditionalGeneration(t.T5Config(
        vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=512, num_layers=2, num_heads=4, decoder_start_token_id=0))
    n = batch or 8
    batches = [(_tokens(torch, g, n, 48), _tokens(torch, g, n, 16)) for _ in range(4)]

    return model, batches, _token_loss, _adamw


class _Clipped:
    """An optimizer that clips the gradients' norm before each step, as the LM example does."""

    def __init__(self, opt: Any, params: list, max_norm: float) -> None:
        self.opt, self.params, self.max_norm = opt, params, max_norm
        self.param_groups = opt.param_groups

    def step(self) -> None:
        import torch

        torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.opt.step()

    def zero_grad(self) -> None:
        self.opt.zero_grad()


def _lstm(torch: Any, g: Any, batch: int | None) -> tuple:
    from torch import nn

    class RnnLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = nn.Dropout(0.2)
            self.emb = nn.Embedding(VOCAB, 64)
            self.rnn = nn.LSTM(64, 128, num_layers=2, batch_first=True, dropout=0.2)
            self.out = nn.Linear(128, VOCAB)

        def forward(self, ids: Any) -> Any:
            h, _ = self.rnn(self.drop(self.emb(ids)))
            return self.out(self.drop(h))

    n = batch or 16
    batches = []
    for _ in range(4):
        ids = _tokens(torch, g, n, 36)
        batches.append((ids[:, :-1], ids[:, 1:]))

    def loss_fn(m: Any, x: Any, y: Any) -> Any:
        return nn.functional.cross_entropy(m(x).flatten(0, 1), y.flatten())

    def opt(params: Any) -> Any:
        params = list(params)
        return _Clipped(torch.optim.SGD(params, lr=20.0), params, 0.25)

    return RnnLM(), batches, loss_fn, opt


_BUILDERS = {"resnet18": _resnet18, "vit": _vit, "distilbert": _distilbert, "gpt2": _gpt2, "t5": _t5,
             "lstm": _lstm}
