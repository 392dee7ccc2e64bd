"""``tf.keras.callbacks``."""

from popjit.errors import missing_attributes
from popjit.keras.callbacks import (  # noqa: F401
    Callback,
    CallbackList,
    CSVLogger,
    EarlyStopping,
    History,
    LambdaCallback,
    LearningRateScheduler,
    ModelCheckpoint,
    ProgbarLogger,
    ReduceLROnPlateau,
    TerminateOnNaN,
)

__getattr__ = missing_attributes("tf.keras.callbacks")
