"""Byte-level BPE: any text round-trips, and the character count behind bits/character is exact."""

import pytest

from viz_model.tokenizer import count_chars, token_bytes, tokenizer_kind, train_bpe
from viz_ui.analysis.text_trace import token_label

TEXTS = ["Max saw a red ball.", "Ünïcödé — “quotes” and 中文 and עברית", "emoji 🐶🎈 and tabs\tand\nnew lines",
         "  leading spaces", "<|endoftext|>Next story."]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_and_character_count(tokenizer, text):
    enc = tokenizer.encode(text)
    assert tokenizer.decode(enc.ids, skip_special_tokens=False) == text
    assert count_chars(tokenizer, enc.ids) == len(text)
    assert b"".join(token_bytes(tokenizer, i) for i in enc.ids) == text.encode("utf-8")


def test_special_token_and_kind(tokenizer):
    assert tokenizer.encode("<|endoftext|>").ids == [tokenizer.token_to_id("<|endoftext|>")]
    assert tokenizer_kind(tokenizer) == "byte-level BPE"
    assert tokenizer.get_vocab_size() == 320


def test_labels_show_spaces_and_partial_characters(tokenizer):
    labels = [token_label(tokenizer, i) for i in tokenizer.encode(" a 🐶").ids]
    assert labels[0].startswith("·")
    assert any(lab.startswith("<F0") for lab in labels)  # the emoji's first byte(s), not a mojibake string


def test_vocab_size_below_the_byte_alphabet_is_refused(corpus):
    with pytest.raises(ValueError, match="at least 257"):
        train_bpe([corpus], vocab_size=100)
