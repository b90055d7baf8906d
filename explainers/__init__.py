"""Word-level explanations of labelattn classifiers, by many methods, through one API.

```python
from explainers import explain
exp = explain(model, tokenizer, "fast delivery but the screen cracked", method="integrated_gradients")
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
from .api import explain, get_explainer
from .base import METHODS, Explainer, TokenScores
from .errors import ExplainerError, ExplainerInputError, MethodError, TargetError
from .explanation import Explanation

__all__ = [
    "METHODS",
    "Explainer",
    "ExplainerError",
    "ExplainerInputError",
    "Explanation",
    "MethodError",
    "TargetError",
    "TokenScores",
    "explain",
    "get_explainer",
]
