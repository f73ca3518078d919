"""ember.aot stage."""
