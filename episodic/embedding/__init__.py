"""episodic.embedding: turning text into dense vectors, and which model's vectors are current.

Owns: the sentence-transformers embedder with its chunking of long text (`embedder`), the same model on
ONNX Runtime (`onnx_encoder`), embedding generations and the switch between models (`generations`), and
the core budget that lets bulk embedding take the idle cores (`cores`).
May import: `episodic.store`, `episodic.kernel`, `episodic.domain`, `schemas` and third-party libraries
(torch, sentence-transformers, onnxruntime). The generations are stored in the store's state, hence the
store below.

The re-embed pass is not here but in `episodic.lifecycle`: it writes memories through the indexer, which
itself asks the generations which vectors to make, so it stands above both.
"""
