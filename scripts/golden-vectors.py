#!/usr/bin/env python3
"""Write the golden all-MiniLM-L6-v2 vectors that engram's candle embedder is tested against.

Run once, by hand, in a throwaway venv outside the repository (torch is ~5 GB, never in CI):

    python3 -m venv /tmp/st-venv && /tmp/st-venv/bin/pip install sentence-transformers
    MODEL_DIR=$(scripts/fetch-model.sh)
    HF_HUB_OFFLINE=1 /tmp/st-venv/bin/python scripts/golden-vectors.py "$MODEL_DIR" \
        crates/engram-providers/tests/fixtures/minilm_golden.json

The output records the sentence-transformers / torch versions and, per sentence, the text,
its token count (with [CLS]/[SEP], before truncation) and the normalised 384-d vector.
"""

import json
import sys

import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer

LONG = (
    "Memory is the faculty of the mind by which data or information is encoded, stored, "
    "and retrieved when needed. It is the retention of information over time for the "
    "purpose of influencing future action. "
) * 12  # ~480 tokens: exercises truncation at 256

SENTENCES = [
    "The user lives in Bengaluru and prefers green tea over coffee.",
    "Crème brûlée, jalapeño, naïve café: Zoë's façade — déjà vu!",
    "I just adopted a puppy 🐶🎉 and I can't stop smiling 😊",
    "  ",
    "?",
    "Ieri sera abbiamo mangiato una pizza margherita a Napoli con i miei cugini.",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{v:?}\"); }",
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    LONG,
]


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: golden-vectors.py MODEL_DIR OUT.json")
    model_dir, out = sys.argv[1], sys.argv[2]
    model = SentenceTransformer(model_dir, device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length
    vectors = model.encode(
        SENTENCES, batch_size=4, normalize_embeddings=True, convert_to_numpy=True
    )
    tok = model.tokenizer
    items = []
    for text, vec in zip(SENTENCES, vectors):
        n_tokens = len(tok(text, add_special_tokens=True, truncation=False)["input_ids"])
        items.append(
            {
                "text": text,
                "tokens": n_tokens,
                "vector": [float(x) for x in vec],
            }
        )
    doc = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "generator": "scripts/golden-vectors.py",
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": model.max_seq_length,
        "normalized": True,
        "items": items,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(items)} vectors to {out}")


if __name__ == "__main__":
    main()
