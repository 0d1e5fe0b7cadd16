"""`transformers` classes around the crammed models:
`AutoModelFor{MaskedLM,SequenceClassification}.from_pretrained(dir, trust_remote_code=True)`.

The export copies this file with configuration_crammed_bert.py and crammed_bert.py, so an exported model
runs the code that trained it: the same forward, [CLS] head and initialization (`init_module`).
"""

from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput

from .configuration_crammed_bert import CrammedBertConfig
from .crammed_bert import CrammedForMaskedLM, CrammedForSequenceClassification, init_module


class CrammedBertPreTrainedModel(PreTrainedModel):
    config_class = CrammedBertConfig
    base_model_prefix = "crammed"

    def _init_weights(self, module):
        """transformers calls this bottom-up for a model built from its config, and for what a checkpoint
        lacks (a new classifier head): the training initialization, init_scheme included."""
        init_module(module, self.config)


class CrammedBertForMaskedLM(CrammedBertPreTrainedModel):
    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = CrammedForMaskedLM(config, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, masked_positions=None):
        """Logits (B, T, V), or (B, k, V) at `masked_positions`. token_type_ids are accepted so that
        `model(**tokenizer(...))` works; the model has no segment embeddings."""
        out = self.crammed(input_ids, labels, masked_positions, attention_mask)
        return MaskedLMOutput(loss=out.loss, logits=out.logits)


class CrammedBertForSequenceClassification(CrammedBertPreTrainedModel):
    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = CrammedForSequenceClassification(config, config.vocab_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        """Logits (B, num_labels) from the [CLS] position; MSE loss when num_labels == 1.
        token_type_ids: as above."""
        out = self.crammed(input_ids, attention_mask=attention_mask, labels=labels)
        return SequenceClassifierOutput(loss=out.loss, logits=out.logits)
