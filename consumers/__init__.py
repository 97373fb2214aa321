"""aiokafka consumer loops: the embedding consumer."""
