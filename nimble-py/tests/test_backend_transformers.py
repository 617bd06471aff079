"""transformers models through torch.compile(backend="nimble") as their documentation calls them:
a tokenizer's output, padded, with its attention mask, unpacked as keyword arguments. On the
CPU (regions in plan order through Inductor); transformers is installed by
scripts/test-python.sh."""

import torch
from transformers import BertConfig, BertModel, BertTokenizer

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
