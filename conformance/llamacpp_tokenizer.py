"""A 512-piece SentencePiece tokenizer for the conformance targets (vocab_size 512), which llama.cpp's converter needs
beside each target's config.json (it takes the vocabulary from --target-model-dir). Deterministic (seed 0); writes
tokenizer.model in the current folder. Needs sentencepiece."""

import random

import sentencepiece as spm

random.seed(0)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(random.choice(letters) for _ in range(random.randint(2, 9))) for _ in range(3000)]
with open("corpus.txt", "w") as fh:
    fh.write("\n".join(" ".join(random.choice(words) for _ in range(12)) for _ in range(4000)))
spm.SentencePieceTrainer.train(input="corpus.txt", model_prefix="tokenizer", vocab_size=512, model_type="bpe", bos_id=1,
                               eos_id=2, unk_id=0, pad_id=-1, hard_vocab_limit=True)
print("pieces", spm.SentencePieceProcessor(model_file="tokenizer.model").get_piece_size())
