"""Word-level explanations of any Hugging Face text classifier, by many methods, through one API.

```python
from explainers import explain, load_classifier
model, tokenizer = load_classifier("path/or/cached-hub-id")
exp = explain(model, tokenizer, "fast delivery but the screen cracked", method="integrated_gradients")
pair = explain(model, tokenizer, ("A man is sleeping.", "Nobody is awake."), method="saliency")
```
"""

# Each method module registers itself on import.
from . import (  # noqa: F401
    attention_flow,
    attention_rollout,
    grad_weighted_attention,
    input_x_gradient,
    integrated_gradients,
    label_attention,
    random_baseline,
    saliency,
    shap,
)
from .api import Predictions, cost_hints, explain, get_explainer, parse_options, predict, supported_methods
from .base import METHODS, Explainer, TokenScores
from .compare import compare, target_for
from .errors import ExplainerError, ExplainerInputError, MethodError, TargetError
from .explanation import Explanation
from .loading import LoadError, load_classifier
from .models import baseline_token_id, token_limit
from .views import save_html, to_html

__all__ = [
    "METHODS",
    "Explainer",
    "ExplainerError",
    "ExplainerInputError",
    "Explanation",
    "LoadError",
    "MethodError",
    "Predictions",
    "TargetError",
    "TokenScores",
    "baseline_token_id",
    "compare",
    "cost_hints",
    "explain",
    "get_explainer",
    "load_classifier",
    "parse_options",
    "predict",
    "save_html",
    "supported_methods",
    "target_for",
    "to_html",
    "token_limit",
]
