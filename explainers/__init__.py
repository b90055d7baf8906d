"""Word-level explanations of any Hugging Face text classifier, by many methods, through one API.

```python
from explainers import explain, load_classifier
model, tokenizer = load_classifier("path/or/cached-hub-id")
exp = explain(model, tokenizer, "fast delivery but the screen cracked", method="integrated_gradients")
pair = explain(model, tokenizer, ("A man is sleeping.", "Nobody is awake."), method="saliency")
```
"""

import importlib
import pkgutil

from .api import Predictions, cost_hints, explain, get_explainer, parse_options, predict, supported_methods
from .base import Explainer, TokenScores
from .compare import compare, target_for
from .errors import ExplainerError, ExplainerInputError, MethodError, NonFiniteLogitsError, TargetError
from .explanation import Explanation
from .loading import LoadError, load_classifier
from .models import baseline_token_id, token_limit
from .registry import METHODS
from .views import save_html, to_html
from .zero_shot import ZeroShotClassifier, explain_zero_shot

# Every module of the package is imported, and each method module registers its class (`@register`): a new method
# is one new module, found here, in `explain`, the command line and the Space with no other edit.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "METHODS",
    "Explainer",
    "ExplainerError",
    "ExplainerInputError",
    "Explanation",
    "LoadError",
    "MethodError",
    "NonFiniteLogitsError",
    "Predictions",
    "TargetError",
    "TokenScores",
    "ZeroShotClassifier",
    "baseline_token_id",
    "compare",
    "cost_hints",
    "explain",
    "explain_zero_shot",
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
