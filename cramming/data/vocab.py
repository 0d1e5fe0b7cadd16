"""The vocabulary's fixed layout, which every part of the pipeline relies on and none owns: the special tokens
at the same ids whatever the corpus or tokenizer kind, and the largest size the stored uint16 rows can hold.

Below the config schema (its vocabulary-size check) and the tokenizers that build the layout; what reads ids
(packing, ordering, MLM masking) imports them from here.
"""

# Trainers add special tokens first and in this order, so the ids never depend on the corpus.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
MAX_VOCAB_SIZE = 2**16  # rows are stored as uint16
