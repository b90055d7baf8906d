"""The recipes of docs/ARCHITECTURE.md, followed: a method is one module (here, one class in a test module); once it
is registered, `supported_methods`, the command line's `--method` and the Space list it, with no other edit."""

import pytest
import torch
from conftest import make_model, save_model

from explainers import METHODS, Explainer, TokenScores, explain, supported_methods
from explainers.registry import register
from explainers.options import Option
from labelattn.cli import main


class FirstWordExplainer(Explainer):
    """A throwaway method: the first word gets `weight`, the others 0."""

    name = "first_word"
    title = "First word (a test)"
    options = (Option("weight", 1.0, float, "the first word's score", minimum=0),)

    def token_scores(self, batch, target, contrast, weight: float) -> TokenScores:
        first = (batch.word_index == 0).to(torch.float32) * weight
        return TokenScores(scores=first)


@pytest.fixture
def registered():
    register(FirstWordExplainer)
    yield FirstWordExplainer.name
    METHODS.pop(FirstWordExplainer.name)


def test_a_registered_method_is_offered_everywhere(registered, tokenizer, tmp_path, capsys):
    from labelattn.space.app import Backend

    model = make_model("embedding")
    assert supported_methods(model, tokenizer)[registered] is None
    exp = explain(model, tokenizer, "who wrote hamlet", method=registered, weight=2.0)
    assert exp.scores == [2.0, 0.0, 0.0] and exp.method == registered
    folder = save_model(model, tokenizer, tmp_path / "model")
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    assert registered in capsys.readouterr().out  # among --method's choices
    assert main(["explain", str(folder), "who wrote hamlet", "--method", registered, "--option", "weight=3"]) == 0
    assert f"{registered} · " in capsys.readouterr().out
    backend = Backend(str(folder))
    assert registered in backend.methods
