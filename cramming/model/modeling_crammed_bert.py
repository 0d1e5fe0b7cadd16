"""`transformers` classes around the crammed encoder, for every Auto class users reach for with an encoder:
`AutoModel` (hidden states), `AutoModelFor{MaskedLM, SequenceClassification, TokenClassification,
QuestionAnswering, MultipleChoice}.from_pretrained(dir, trust_remote_code=True)`.

The export copies this file with configuration_crammed_bert.py and the model's files (crammed_bert.py,
layers.py, unpadded.py, initialization.py), so an exported model runs the code that trained it: the same
forward, [CLS] head and initialization (`init_module`). Every class
keeps the encoder at `crammed.bert`, so any of them loads the encoder of any export; a head the export
lacks starts from the training initialization. Written against the API that transformers 4.50+ and 5.x
share.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .configuration_crammed_bert import CrammedBertConfig
from .crammed_bert import (
    CrammedForMaskedLM,
    CrammedForSequenceClassification,
    Encoder,
    never_special,
)
from .initialization import init_module
# transformers 5.0 copies from a local export folder only the files that this file imports, not the files
# those import (fixed by huggingface/transformers#46022): so every model file it needs is imported here.
from .layers import Layer  # noqa: F401
from .unpadded import Unpadded  # noqa: F401


class CrammedBertPreTrainedModel(PreTrainedModel):
    config_class = CrammedBertConfig
    base_model_prefix = "crammed"
    supports_gradient_checkpointing = True  # the encoder recomputes each layer (Encoder._run)
    _supports_sdpa = True  # the default; attn_implementation="eager" writes softmax(q kᵀ/√d) v out

    def _init_weights(self, module):
        """transformers calls this bottom-up for a model built from its config, and for what a checkpoint
        lacks (a new task head): the training initialization, init_scheme included."""
        init_module(module, self.config)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.crammed.bert.embeddings.word_embeddings

    def set_input_embeddings(self, embeddings: nn.Embedding) -> None:
        """The masked-LM decoder reads this matrix too (weights tied by construction)."""
        self.crammed.bert.embeddings.word_embeddings = embeddings

    def _encode(self, input_ids, attention_mask, output_hidden_states, output_attentions):
        """Last hidden state (B, T, C) and, if asked for, every layer's states and attention probabilities.
        The eager path runs when probabilities are wanted or `attn_implementation="eager"` was chosen."""
        eager = bool(output_attentions) or self.config._attn_implementation == "eager"
        if not (eager or output_hidden_states):
            return self.crammed.bert(input_ids, attention_mask), None, None
        states = self.crammed.bert.states(input_ids, attention_mask, eager=eager)
        hidden = states.hidden_states if output_hidden_states else None
        return states.hidden_states[-1], hidden, states.attentions if output_attentions else None

    @staticmethod
    def _returned(output, return_dict):
        return output if return_dict is None or return_dict else output.to_tuple()


class CrammedBertModel(CrammedBertPreTrainedModel):
    """The encoder alone: `last_hidden_state` (B, T, C), for feature extraction and new heads."""

    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = nn.Module()
        self.crammed.bert = Encoder(config, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, output_hidden_states=None,
                output_attentions=None, return_dict=None):
        """token_type_ids are accepted so that `model(**tokenizer(...))` works; the model has no segments."""
        last, hidden, attentions = self._encode(input_ids, attention_mask, output_hidden_states, output_attentions)
        return self._returned(BaseModelOutput(last, hidden, attentions), return_dict)


class CrammedBertForMaskedLM(CrammedBertPreTrainedModel):
    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = CrammedForMaskedLM(config, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, masked_positions=None,
                output_hidden_states=None, output_attentions=None, return_dict=None):
        """Logits (B, T, V), or (B, k, V) at `masked_positions` (B, k); token_type_ids: as CrammedBertModel.
        Without labels or masked_positions (a prediction: the fill-mask pipeline's call) no special token is
        ever proposed, as in the training model's forward; with masked_positions, the head's own logits (a
        scorer's: cramming.eval.masked_lm)."""
        if output_hidden_states or output_attentions or self.config._attn_implementation == "eager":
            last, hidden, attentions = self._encode(input_ids, attention_mask, output_hidden_states,
                                                    output_attentions)
            if masked_positions is not None:
                last = torch.gather(last, 1, masked_positions[:, :, None].expand(-1, -1, last.size(-1)))
                labels = None if labels is None else labels.gather(1, masked_positions)
            logits = self.crammed.cls(last, self.get_input_embeddings().weight)  # (B, T or k, V)
            loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
            if labels is None and masked_positions is None:
                logits = never_special(logits)
        else:
            out = self.crammed(input_ids, labels, masked_positions, attention_mask)
            loss, logits, hidden, attentions = out.loss, out.logits, None, None
        return self._returned(MaskedLMOutput(loss, logits, hidden, attentions), return_dict)

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        """transformers resizes the input embedding (which is also the decoder); the decoder bias follows."""
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        size = embeddings.num_embeddings
        bias = self.crammed.cls.bias
        if bias is not None and bias.numel() != size:
            grown = bias.new_zeros(size)
            grown[: min(size, bias.numel())] = bias[:size]
            self.crammed.cls.bias = nn.Parameter(grown)
        self.crammed.vocab_size = size
        return embeddings


class CrammedBertForSequenceClassification(CrammedBertPreTrainedModel):
    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = CrammedForSequenceClassification(config, config.vocab_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, output_attentions=None, return_dict=None):
        """Logits (B, num_labels) from the [CLS] position; MSE loss when num_labels == 1."""
        last, hidden, attentions = self._encode(input_ids, attention_mask, output_hidden_states, output_attentions)
        logits = self.crammed.head(last, attention_mask)  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = (F.mse_loss(logits.squeeze(-1).float(), labels.float()) if self.config.num_labels == 1
                    else F.cross_entropy(logits.float(), labels))
        return self._returned(SequenceClassifierOutput(loss, logits, hidden, attentions), return_dict)


class CrammedBertForTokenClassification(CrammedBertPreTrainedModel):
    """A label per token (NER, POS): dropout and a linear layer on every hidden state, as BERT's."""

    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = nn.Module()
        self.crammed.bert = Encoder(config, config.vocab_size)
        self.crammed.token_head = nn.Sequential(nn.Dropout(config.dropout),
                                                nn.Linear(config.hidden_size, config.num_labels))
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, output_attentions=None, return_dict=None):
        """Logits (B, T, num_labels); labels (B, T) with -100 where nothing is predicted."""
        last, hidden, attentions = self._encode(input_ids, attention_mask, output_hidden_states, output_attentions)
        logits = self.crammed.token_head(last)  # (B, T, num_labels)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        return self._returned(TokenClassifierOutput(loss, logits, hidden, attentions), return_dict)


class CrammedBertForQuestionAnswering(CrammedBertPreTrainedModel):
    """Extractive QA (SQuAD): start and end logits per token from one linear layer, as BERT's."""

    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = nn.Module()
        self.crammed.bert = Encoder(config, config.vocab_size)
        self.crammed.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None, output_hidden_states=None, output_attentions=None, return_dict=None):
        """start_logits, end_logits (B, T); the loss averages both cross-entropies, positions outside the
        sequence being ignored."""
        last, hidden, attentions = self._encode(input_ids, attention_mask, output_hidden_states, output_attentions)
        start_logits, end_logits = self.crammed.qa_outputs(last).unbind(dim=-1)  # (B, T) each
        loss = None
        if start_positions is not None and end_positions is not None:
            T = start_logits.size(1)
            loss = (F.cross_entropy(start_logits.float(), start_positions.clamp(0, T), ignore_index=T)
                    + F.cross_entropy(end_logits.float(), end_positions.clamp(0, T), ignore_index=T)) / 2
        output = QuestionAnsweringModelOutput(loss, start_logits, end_logits, hidden, attentions)
        return self._returned(output, return_dict)


class CrammedBertForMultipleChoice(CrammedBertPreTrainedModel):
    """One score per choice (SWAG): each (context, choice) pair through the encoder and a one-output [CLS] head,
    laid out as the one-output sequence classifier, so that the weights of either load into the other."""

    def __init__(self, config: CrammedBertConfig):
        super().__init__(config)
        self.crammed = CrammedForSequenceClassification(config, config.vocab_size, 1)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=None, output_attentions=None, return_dict=None):
        """input_ids (B, choices, T) to logits (B, choices); labels (B,) the right choice."""
        B, choices, T = input_ids.shape
        flat_mask = None if attention_mask is None else attention_mask.reshape(B * choices, T)
        last, hidden, attentions = self._encode(input_ids.reshape(B * choices, T), flat_mask,
                                                output_hidden_states, output_attentions)
        logits = self.crammed.head(last, flat_mask).view(B, choices)  # (B * choices, 1) -> (B, choices)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels)
        return self._returned(MultipleChoiceModelOutput(loss, logits, hidden, attentions), return_dict)
