"""The contract mixins, one per behaviour area."""
