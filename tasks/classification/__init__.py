"""Image classification (MLPerf's resnet50): [N, classes] models, labelled image folders and
top-1 accuracy."""
