"""`transformers` classes around the crammed models:
`AutoModelFor{MaskedLM,SequenceClassification}.from_pretrained(dir, trust_remote_code=True)`.

The export copies this file with its relative imports (modeling, encoder, heads, layers: torch only), so an
exported model runs exactly the code that trained it, [CLS] classification head included.
"""

from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput

from .configuration_crammed_bert import CrammedBertConfig
from .layers import Embeddings
from .modeling import CrammedForMaskedLM, CrammedForSequenceClassification


class CrammedBertPreTrainedModel(PreTrainedModel):
    config_class = CrammedBertConfig
    base_model_prefix = "crammed"

    def _init_weights(self, module):
        """Fills what a checkpoint lacks (a new classifier head): N(0, init_std), zero biases, unit norms."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
        if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
        if isinstance(module, Embeddings) and module.position_embeddings is None:
            nn.init.constant_(module.position_scale, self.config.hidden_size**-0.5)


class CrammedBertForMaskedLM(CrammedBertPreTrainedModel):
    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = CrammedForMaskedLM(config, config.vocab_size)
        self.post_init()

    def forward(
        self, input_ids, attention_mask=None, token_type_ids=None, labels=None, masked_positions=None
    ):
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
