"""Word-level explanations of labelattn classifiers, by many methods, through one API.

```python
from explainers import explain
exp = explain(model, tokenizer, "fast delivery but the screen cracked", method="integrated_gradients")
```
"""

from . import label_attention  # noqa: F401  (each method module registers itself)
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
