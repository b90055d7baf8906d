"""How good explanations are: faithfulness to the model (`faithfulness`: comprehensiveness, sufficiency,
τ-LOO, rank agreement) and plausibility against people's rationales (`rationales`). Reads explanations and the
model; the methods never import it."""
