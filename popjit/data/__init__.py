"""``tf.data`` on popjit: host-side input pipelines that feed compiled programs."""
