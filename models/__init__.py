"""Model programs, found by name through `voxrt.models.registry`. Shipped as the subpackage `voxrt.models`."""
