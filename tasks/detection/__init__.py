"""Object detection (MLPerf's yolo): detector files, COCO- and YOLO-format datasets, NMS and
COCO mAP."""
