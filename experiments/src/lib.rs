//! `experiments` (not implemented yet): the paper's models and experiment definitions.
//!
//! This crate will register the evaluated networks (ResNet-50/101, Inception-v3, MobileNetV2,
//! EfficientNet-B0/B5, NASNet-A mobile and large, DARTS, AmoebaNet, and CIFAR-10 training
//! variants) with their input shapes, and the experiments that regenerate the paper's figures,
//! with their result records. It has no code yet and does not pretend to.
