"""kvlab's page (``kvlab serve``): a form over the Python API, in a local web page (``app.py``), its fields derived
from the settings' declarations (``form.py``)."""
