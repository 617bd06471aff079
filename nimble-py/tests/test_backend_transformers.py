"""transformers models through torch.compile(backend="nimble") as their documentation calls them:
a tokenizer's output, padded, with its attention mask, unpacked as keyword arguments. On the
CPU (Inductor's program in the plan's order); transformers is installed by
scripts/test-python.sh."""

import torch
from transformers import BertConfig, BertModel, BertTokenizer, LlamaConfig, LlamaModel

import nimble_rs

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "a", "streams", "graph"]


def test_a_bert_called_with_its_tokenizers_output_matches_eager(tmp_path):
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("\n".join(WORDS) + "\n")
    tokenizer = BertTokenizer(str(vocabulary))
    inputs = tokenizer(["the quick brown fox", "a lazy dog jumps over the graph"], padding=True, return_tensors="pt")
    assert inputs["attention_mask"].min() == 0, "the shorter sentence is padded and masked"
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    model = BertModel(config).eval()
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    fast = torch.compile(model, backend="nimble")
    with torch.no_grad():
        expected = model(**inputs)
        got = fast(**inputs)
        assert torch.allclose(got.last_hidden_state, expected.last_hidden_state, atol=1e-5)
        assert torch.allclose(got.pooler_output, expected.pooler_output, atol=1e-5)
        # Another batch of the same shape, other words and mask: the same compiled graph.
        other = tokenizer(["streams graph", "the fox jumps over a lazy brown dog"], padding="max_length", truncation=True, max_length=inputs["input_ids"].shape[1], return_tensors="pt")
        assert torch.allclose(fast(**other).last_hidden_state, model(**other).last_hidden_state, atol=1e-5)
    reports = nimble_rs.dynamo.reports()[before:]
    assert reports and max(r.get("streams", 1) for r in reports) >= 2, reports


def test_a_llama_style_decoder_with_a_padding_mask_matches_eager_in_plan_order():
    # RMSNorm, rotary embeddings, grouped-query attention and the gated SiLU as Inductor fuses
    # them, read back and run in the plan's order (not Inductor's), with a left-padded batch.
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    model = LlamaModel(config).eval()
    ids = torch.randint(0, 64, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :5] = 0
    torch._dynamo.reset()
    before = len(nimble_rs.dynamo.reports())
    fast = torch.compile(model, backend="nimble")
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        got = fast(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()
    reports = nimble_rs.dynamo.reports()[before:]
    assert reports and all(r["granularity"] == "kernels" and "unplanned" not in r for r in reports), reports
    assert max(r.get("streams", 1) for r in reports) >= 2, reports
