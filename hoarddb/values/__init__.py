"""BSON value semantics: order, order-preserving keys, filters and updates; pure functions, no I/O."""
