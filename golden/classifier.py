"""A NumPy digit classifier for the legibility of generated samples: k-nearest neighbours over
the real MNIST-5k digits (the workload's training data), on images standardized per pixel."""

import numpy as np

from .mnist import load_mnist

__all__ = ["DigitClassifier"]


class DigitClassifier:
    def __init__(self, k: int = 5, images=None, labels=None):
        if images is None:
            images, labels = load_mnist()
        self.k = k
        self.x = np.asarray(images, dtype=np.float32).reshape(len(images), -1)
        self.y = np.asarray(labels, dtype=np.int64)
        self._sq = (self.x ** 2).sum(axis=1)

    def predict(self, images) -> np.ndarray:
        q = np.asarray(images, dtype=np.float32).reshape(len(images), -1)
        d = self._sq[None, :] - 2.0 * (q @ self.x.T)        # |q|^2 is constant per row
        nn = np.argpartition(d, self.k, axis=1)[:, :self.k]
        votes = np.zeros((len(q), 10), dtype=np.float64)
        # Nearer neighbours break ties: weight each vote by 1 / rank.
        order = np.take_along_axis(d, nn, axis=1).argsort(axis=1)
        nn = np.take_along_axis(nn, order, axis=1)
        for r in range(self.k):
            votes[np.arange(len(q)), self.y[nn[:, r]]] += 1.0 / (r + 1)
        return votes.argmax(axis=1)

    def accuracy(self, images, labels) -> float:
        return float((self.predict(images) == np.asarray(labels)).mean())
