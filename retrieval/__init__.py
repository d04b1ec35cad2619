"""Retrieval side (SPEC §7): chunking, embedding with the fine-tuned encoder, FAISS index, search.
Plain library: never imports prefect."""
